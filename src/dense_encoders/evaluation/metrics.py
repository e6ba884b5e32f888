"""Retrieval metrics and significance tests.

Every metric value comes from `ir-measures <https://ir-measur.es>`_ (which runs
``pytrec_eval-terrier``, the Python binding of ``trec_eval``, for most measures); nothing
here re-implements a metric.  This module only fixes *which* queries are evaluated and how
per-query values are averaged, so that aggregate numbers, per-query numbers and the
significance tests built on them all agree:

* evaluated queries are the queries of the qrels with at least one relevant document
  (grade >= ``relevance_level``, 1 by default; TREC DL convention: 2);
* ``relevance_level`` is also the grade from which binary measures (RR, R, Success, P, AP, ...:
  those with an ir-measures ``rel`` parameter not set in the measure string) count a document as
  relevant; nDCG keeps the graded values;
* an evaluated query that is missing from the run scores 0 on every measure
  (``trec_eval -c``);
* run queries that are not in the qrels are ignored;
* the aggregate is the arithmetic mean of the per-query values over the evaluated queries.

Significance: :func:`paired_t_test` (two-sided paired t-test over queries) and
:func:`holm_bonferroni` (Holm's step-down correction across several comparisons, e.g. one
test per dataset, as in the TITE paper).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping

import ir_measures
import numpy as np
from scipy import stats

from ..data.retrieval import check_relevance_level
from ..settings.evaluation import DEFAULT_MEASURES  # re-exported (--help reads it there, without ir-measures)

__all__ = ["DEFAULT_MEASURES", "compute_metrics", "holm_bonferroni", "paired_t_test"]


def _parse_measures(measures: Mapping[str, str]) -> dict[str, object]:
    """Parse ``{name: measure string}`` into ``{name: ir_measures Measure}``; ValueError if bad."""
    if not measures:
        raise ValueError("measures must name at least one measure")
    parsed: dict[str, object] = {}
    for name, measure_str in measures.items():
        if not isinstance(measure_str, str):
            raise ValueError(
                f"measure for {name!r} must be an ir-measures measure string, got {measure_str!r}"
            )
        try:
            measure = ir_measures.parse_measure(measure_str)
            supported = ir_measures.DefaultPipeline.supports(measure)
        except Exception as exc:  # parse_measure raises NameError/ValueError/SyntaxError/...
            raise ValueError(
                f"unknown or invalid ir-measures measure {measure_str!r} (for {name!r}): {exc}"
            ) from exc
        if not supported:
            raise ValueError(
                f"ir-measures measure {measure_str!r} (for {name!r}) is not supported by any "
                "installed ir-measures provider"
            )
        parsed[name] = measure
    return parsed


def _evaluated_qrels(qrels: Mapping[str, Mapping[str, int]], relevance_level: int) -> dict[str, dict[str, int]]:
    """The evaluated queries of ``qrels`` (at least one grade >= ``relevance_level``), in qrels order, ids as
    strings. ``operator.index`` accepts int-like grades (numpy ints, bools) and rejects floats, which
    pytrec_eval cannot take."""
    clean_qrels: dict[str, dict[str, int]] = {}
    for qid, docs in qrels.items():
        grades = {str(did): operator.index(grade) for did, grade in docs.items()}
        if any(grade >= relevance_level for grade in grades.values()):
            clean_qrels[str(qid)] = grades
    if not clean_qrels:
        raise ValueError(
            f"no query in qrels has a relevant document (grade >= {relevance_level}); nothing to evaluate"
        )
    return clean_qrels


def compute_metrics(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    measures: Mapping[str, str] | None = None,
    *,
    relevance_level: int = 1,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Evaluate a run against qrels with ir-measures.

    Args:
        qrels: ``{query_id: {doc_id: grade}}`` with integer grades (0 = not relevant).
        run: ``{query_id: {doc_id: score}}``; higher score = ranked higher.
        measures: ``{result name: ir-measures measure string}``; defaults to
            :data:`DEFAULT_MEASURES`.
        relevance_level: the grade from which a document counts as relevant for binary
            measures (a measure string's own ``rel=`` wins) and for choosing evaluated queries.

    Returns:
        ``(aggregate, per_query)``: ``aggregate[name]`` is the mean of
        ``per_query[name][qid]`` over the evaluated queries (qrels queries with at least one
        document of grade >= relevance_level, in qrels order).  An evaluated query absent from the run (or
        with no documents in it) counts 0 for every measure; run-only queries are ignored.

    Raises:
        ValueError: no qrels query has a relevant document, or a measure string is unknown,
            invalid or unsupported.

    Ranking and ties: the run is ranked by score by the ir-measures provider, not here.
    ``pytrec_eval`` (nDCG, R, Success, P, AP, RR without cutoff, ...) follows ``trec_eval``
    and breaks score ties by doc id *descending*; ``RR@k`` has no pytrec_eval
    implementation and is computed by ir-measures' MS MARCO provider, which breaks ties by
    doc id *ascending*.  With tied scores, ``mrr@10`` and ``ndcg@10`` may therefore see
    different orders; give distinct scores if that matters.
    """
    measure_strs = DEFAULT_MEASURES if measures is None else measures
    check_relevance_level(relevance_level)
    parsed = _parse_measures(measure_strs)
    if relevance_level != 1:
        parsed = {
            name: measure(rel=relevance_level)
            if "rel" in measure.SUPPORTED_PARAMS and "rel" not in measure.params else measure
            for name, measure in parsed.items()
        }

    clean_qrels = _evaluated_qrels(qrels, relevance_level)
    clean_run: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        qid = str(qid)
        if qid in clean_qrels and docs:
            clean_run[qid] = {str(did): float(score) for did, score in docs.items()}

    # Several names may share one measure (e.g. "nDCG@10" twice): map measure -> names.
    names_by_measure: dict[object, list[str]] = {}
    for name, measure in parsed.items():
        names_by_measure.setdefault(measure, []).append(name)

    found: dict[str, dict[str, float]] = {name: {} for name in parsed}
    if clean_run:
        for metric in ir_measures.iter_calc(list(names_by_measure), clean_qrels, clean_run):
            if metric.query_id not in clean_qrels:
                continue
            for name in names_by_measure.get(metric.measure, ()):
                found[name][metric.query_id] = float(metric.value)

    per_query: dict[str, dict[str, float]] = {
        name: {qid: found[name].get(qid, 0.0) for qid in clean_qrels} for name in parsed
    }
    aggregate = {
        name: math.fsum(values.values()) / len(values) for name, values in per_query.items()
    }
    return aggregate, per_query


def paired_t_test(
    per_query_a: Mapping[str, float], per_query_b: Mapping[str, float]
) -> tuple[float, float]:
    """Two-sided paired t-test (``scipy.stats.ttest_rel``) of system A against system B.

    Only queries present in both inputs are paired.  The statistic is positive when A scores
    higher on average.  If every paired difference is exactly zero, returns ``(0.0, 1.0)``
    instead of scipy's NaN.

    Raises:
        ValueError: fewer than 2 common queries.
    """
    common = [qid for qid in per_query_a if qid in per_query_b]
    if len(common) < 2:
        raise ValueError(
            f"paired t-test needs at least 2 queries common to both systems, got {len(common)}"
        )
    a = np.array([float(per_query_a[qid]) for qid in common], dtype=np.float64)
    b = np.array([float(per_query_b[qid]) for qid in common], dtype=np.float64)
    if np.all(a - b == 0.0):
        return 0.0, 1.0
    result = stats.ttest_rel(a, b)
    return float(result.statistic), float(result.pvalue)


def holm_bonferroni(
    p_values: Mapping[str, float], alpha: float = 0.05
) -> dict[str, tuple[float, bool]]:
    """Holm-Bonferroni step-down correction for ``m`` tests (e.g. one per dataset).

    With the p-values sorted ascending ``p_(1) <= ... <= p_(m)``, the adjusted value is
    ``max_{j <= i} min(1, (m - j + 1) * p_(j))``; a hypothesis is rejected when its adjusted
    p-value is ``<= alpha``.

    Returns:
        ``{name: (adjusted_p, rejected)}`` in the input order.

    Raises:
        ValueError: a p-value outside [0, 1] (or NaN), or ``alpha`` not in (0, 1).
    """
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    for name, p in p_values.items():
        if not (0.0 <= float(p) <= 1.0):
            raise ValueError(f"p-value for {name!r} must be in [0, 1], got {p!r}")
    m = len(p_values)
    ordered = sorted(p_values, key=lambda name: float(p_values[name]))
    adjusted: dict[str, float] = {}
    running_max = 0.0
    for j, name in enumerate(ordered, start=1):
        running_max = max(running_max, min(1.0, (m - j + 1) * float(p_values[name])))
        adjusted[name] = running_max
    return {name: (adjusted[name], adjusted[name] <= alpha) for name in p_values}
