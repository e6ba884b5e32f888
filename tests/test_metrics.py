"""Tests for dense_encoders.evaluation.metrics against hand-computed and independent references."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval
from scipy import stats

from dense_encoders.evaluation.metrics import (
    DEFAULT_MEASURES,
    compute_metrics,
    holm_bonferroni,
    paired_t_test,
)

# ---------------------------------------------------------------------------------------------
# compute_metrics: hand-built example
# ---------------------------------------------------------------------------------------------


def _ranked(doc_ids: list[str]) -> dict[str, float]:
    """A run entry ranking ``doc_ids`` in the given order with distinct scores (no ties)."""
    return {did: float(len(doc_ids) - i) for i, did in enumerate(doc_ids)}


QRELS = {
    # graded; the first relevant document retrieved (d2) has grade 1, d4 is never retrieved
    "q1": {"d1": 2, "d2": 1, "d3": 0, "d4": 1},
    # relevant documents at ranks 11 and 150, a third one not retrieved
    "q2": {"d5": 1, "d6": 2, "d7": 1},
    # only non-relevant judgements: not evaluated
    "q3": {"d8": 0},
    # missing from the run: counts 0
    "q4": {"d9": 1},
}
RUN = {
    # ranks: 1 d3 (grade 0), 2 d2 (grade 1), 3 u1 (unjudged), 4 d1 (grade 2), 5.. unjudged
    "q1": _ranked(["d3", "d2", "u1", "d1"] + [f"x{i}" for i in range(20)]),
    # ranks 1-10 non-relevant, 11 d5, 150 d6
    "q2": _ranked([f"n{i}" for i in range(10)] + ["d5"] + [f"f{i}" for i in range(138)] + ["d6"]),
    "q3": _ranked(["d8", "z"]),
    # only in the run: ignored
    "q5": _ranked(["d1", "d9"]),
}


def _log2_discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


def test_default_measures_names_and_order():
    assert list(DEFAULT_MEASURES.items()) == [
        ("ndcg@10", "nDCG@10"),
        ("mrr@10", "RR@10"),
        ("recall@100", "R@100"),
        ("recall@1000", "R@1000"),
        ("hits@10", "Success@10"),
    ]


def test_rank_helper_places_documents_where_the_hand_computation_assumes():
    order = sorted(RUN["q2"], key=lambda d: -RUN["q2"][d])
    assert order.index("d5") + 1 == 11 and order.index("d6") + 1 == 150
    assert len(order) == 150


def test_compute_metrics_against_hand_computation():
    aggregate, per_query = compute_metrics(QRELS, RUN)

    assert list(aggregate) == list(DEFAULT_MEASURES)
    assert list(per_query) == list(DEFAULT_MEASURES)
    # q3 (only grade 0) and q5 (run only) are not evaluated; q4 (missing from run) is
    for name in DEFAULT_MEASURES:
        assert list(per_query[name]) == ["q1", "q2", "q4"]

    # q1 nDCG@10, trec_eval convention: gain = grade, discount 1/log2(rank + 1).
    dcg_q1 = 1 * _log2_discount(2) + 2 * _log2_discount(4)
    idcg_q1 = 2 * _log2_discount(1) + 1 * _log2_discount(2) + 1 * _log2_discount(3)
    ndcg_q1 = dcg_q1 / idcg_q1
    # the exponential gain (2**grade - 1) would give a different number: make sure it's not that
    exp_dcg_q1 = 1 * _log2_discount(2) + 3 * _log2_discount(4)
    exp_idcg_q1 = 3 * _log2_discount(1) + 1 * _log2_discount(2) + 1 * _log2_discount(3)
    assert abs(ndcg_q1 - exp_dcg_q1 / exp_idcg_q1) > 1e-3

    expected = {
        "ndcg@10": {"q1": ndcg_q1, "q2": 0.0, "q4": 0.0},
        # grade-1 d2 at rank 2 is relevant (rel=1); q2's first relevant is at rank 11 (> 10)
        "mrr@10": {"q1": 1 / 2, "q2": 0.0, "q4": 0.0},
        # q1: 2 of 3 relevant retrieved; q2: only d5 (rank 11) within 100, d6 (rank 150) within 1000
        "recall@100": {"q1": 2 / 3, "q2": 1 / 3, "q4": 0.0},
        "recall@1000": {"q1": 2 / 3, "q2": 2 / 3, "q4": 0.0},
        "hits@10": {"q1": 1.0, "q2": 0.0, "q4": 0.0},
    }
    for name, values in expected.items():
        for qid, value in values.items():
            assert per_query[name][qid] == pytest.approx(value, abs=1e-9), (name, qid)
        # mean over the 3 evaluated queries, the missing q4 included as 0
        assert aggregate[name] == pytest.approx(sum(values.values()) / 3, abs=1e-9), name

    assert aggregate["ndcg@10"] == pytest.approx(ndcg_q1 / 3, abs=1e-9)
    assert aggregate["recall@1000"] == pytest.approx(4 / 9, abs=1e-9)


def test_relevance_threshold_is_grade_one():
    # a single grade-1 document at rank 1 is relevant for every default measure
    aggregate, _ = compute_metrics({"q": {"a": 1, "b": 0}}, {"q": {"a": 2.0, "b": 1.0}})
    assert aggregate == pytest.approx({name: 1.0 for name in DEFAULT_MEASURES})
    # with a stricter custom threshold, the same ranking gets no reciprocal rank
    aggregate, _ = compute_metrics(
        {"q": {"a": 1, "b": 2}}, {"q": {"a": 2.0, "b": 1.0}}, {"strict": "RR(rel=2)@10"}
    )
    assert aggregate == {"strict": pytest.approx(0.5)}


def test_custom_measures_and_shared_measure():
    qrels = {"q": {"a": 1, "b": 1}}
    run = {"q": {"x": 3.0, "a": 2.0, "b": 1.0}}
    aggregate, per_query = compute_metrics(qrels, run, {"p@2": "P@2", "p2 again": "P(cutoff=2)"})
    assert aggregate == {"p@2": pytest.approx(0.5), "p2 again": pytest.approx(0.5)}
    assert per_query == {"p@2": {"q": pytest.approx(0.5)}, "p2 again": {"q": pytest.approx(0.5)}}


def test_tie_breaking_conventions_are_as_documented():
    # all three documents tied: trec_eval order is doc id descending (c, b, a);
    # RR@k (MS MARCO provider) orders doc id ascending (a, b, c)
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    _, per_query = compute_metrics(
        {"q": {"a": 1}}, run, {"ndcg": "nDCG@10", "rr": "RR", "rr10": "RR@10"}
    )
    assert per_query["ndcg"]["q"] == pytest.approx(_log2_discount(3))
    assert per_query["rr"]["q"] == pytest.approx(1 / 3)
    assert per_query["rr10"]["q"] == pytest.approx(1.0)


def test_compute_metrics_errors():
    with pytest.raises(ValueError, match="relevant"):
        compute_metrics({"q": {"a": 0}}, {"q": {"a": 1.0}})
    with pytest.raises(ValueError, match="relevant"):
        compute_metrics({}, {})
    with pytest.raises(ValueError, match="NotAMeasure@10"):
        compute_metrics({"q": {"a": 1}}, {"q": {"a": 1.0}}, {"x": "NotAMeasure@10"})
    with pytest.raises(ValueError, match="nDCG@ten"):
        compute_metrics({"q": {"a": 1}}, {"q": {"a": 1.0}}, {"x": "nDCG@ten"})
    with pytest.raises(ValueError, match="nDCG\\(foo=1\\)@10"):
        compute_metrics({"q": {"a": 1}}, {"q": {"a": 1.0}}, {"x": "nDCG(foo=1)@10"})
    with pytest.raises(ValueError):
        compute_metrics({"q": {"a": 1}}, {"q": {"a": 1.0}}, {})


def test_empty_run_counts_zero():
    aggregate, per_query = compute_metrics({"q": {"a": 1}, "r": {"b": 2}}, {"q": {}})
    assert aggregate == {name: 0.0 for name in DEFAULT_MEASURES}
    assert per_query["mrr@10"] == {"q": 0.0, "r": 0.0}


# ---------------------------------------------------------------------------------------------
# compute_metrics: independent check against pytrec_eval and a reference RR@10
# ---------------------------------------------------------------------------------------------


def _random_collection(seed: int):
    rng = random.Random(seed)
    docs = [f"doc{i}" for i in range(300)]
    qrels, run = {}, {}
    for q in range(40):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[qid] = {d: rng.choice([0, 0, 1, 2, 3]) for d in judged}
        if q % 7 == 3:
            continue  # missing from the run
        retrieved = rng.sample(docs, rng.randint(50, 200))
        # distinct scores, so no tie-breaking convention is involved
        scores = rng.sample(range(10**6), len(retrieved))
        run[qid] = {d: s / 1000.0 for d, s in zip(retrieved, scores)}
    run["only_in_run"] = {"doc1": 1.0}
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1])
def test_compute_metrics_matches_pytrec_eval_directly(seed):
    qrels, run = _random_collection(seed)
    aggregate, per_query = compute_metrics(qrels, run)

    evaluated = [q for q, docs in qrels.items() if any(g > 0 for g in docs.values())]
    assert 0 < len(evaluated) < len(qrels)  # the random data exercises the grade-0-only case
    assert sorted(per_query["ndcg@10"]) == sorted(evaluated)

    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut_10", "recall_100", "success_10"}, relevance_level=1
    )
    reference = evaluator.evaluate({q: d for q, d in run.items() if q in qrels})
    for qid in evaluated:
        ref = reference.get(qid, {"ndcg_cut_10": 0.0, "recall_100": 0.0, "success_10": 0.0})
        assert per_query["ndcg@10"][qid] == pytest.approx(ref["ndcg_cut_10"], abs=1e-12)
        assert per_query["recall@100"][qid] == pytest.approx(ref["recall_100"], abs=1e-12)
        assert per_query["hits@10"][qid] == pytest.approx(ref["success_10"], abs=1e-12)

        # reciprocal rank at 10, computed here from scratch
        ranking = sorted(run.get(qid, {}), key=lambda d: -run[qid][d])[:10]
        ranks = [i + 1 for i, d in enumerate(ranking) if qrels[qid].get(d, 0) >= 1]
        assert per_query["mrr@10"][qid] == pytest.approx(1 / ranks[0] if ranks else 0.0)

    for name, values in per_query.items():
        assert aggregate[name] == pytest.approx(sum(values.values()) / len(evaluated), abs=1e-12)
    # sanity: the data has both hits and misses, so the comparison is not vacuous
    assert 0.0 < aggregate["hits@10"] < 1.0


# ---------------------------------------------------------------------------------------------
# paired_t_test
# ---------------------------------------------------------------------------------------------


def test_paired_t_test_against_hand_computation():
    a = {"q1": 0.9, "q2": 0.4, "q3": 0.7, "q4": 0.3, "q5": 0.8, "only_a": 0.0}
    b = {"q1": 0.5, "q2": 0.5, "q3": 0.2, "q4": 0.1, "q5": 0.6, "only_b": 1.0}
    diffs = [0.4, -0.1, 0.5, 0.2, 0.2]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    t_hand = mean / (sd / math.sqrt(n))
    p_hand = 2 * stats.t.sf(abs(t_hand), df=n - 1)

    t, p = paired_t_test(a, b)
    assert t == pytest.approx(t_hand, rel=1e-9)
    assert p == pytest.approx(p_hand, rel=1e-9)
    assert 0.0 < p < 1.0
    # swapping the systems flips the sign, keeps the p-value
    t_swapped, p_swapped = paired_t_test(b, a)
    assert t_swapped == pytest.approx(-t_hand, rel=1e-9)
    assert p_swapped == pytest.approx(p_hand, rel=1e-9)
    assert isinstance(t, float) and isinstance(p, float)


def test_paired_t_test_zero_differences():
    a = {"q1": 0.3, "q2": 0.5, "q3": 1.0}
    assert paired_t_test(a, dict(a)) == (0.0, 1.0)


def test_paired_t_test_too_few_common_queries():
    with pytest.raises(ValueError, match="at least 2"):
        paired_t_test({"q1": 0.1, "q2": 0.2}, {"q1": 0.3, "q3": 0.4})
    with pytest.raises(ValueError, match="at least 2"):
        paired_t_test({}, {})


# ---------------------------------------------------------------------------------------------
# holm_bonferroni
# ---------------------------------------------------------------------------------------------


def test_holm_bonferroni_hand_worked_example():
    p_values = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}
    # sorted: d 0.005, a 0.01, c 0.03, b 0.04 with m = 4
    #   d: 4 * 0.005 = 0.02
    #   a: 3 * 0.01  = 0.03                 -> max(0.02, 0.03) = 0.03
    #   c: 2 * 0.03  = 0.06                 -> 0.06
    #   b: 1 * 0.04  = 0.04 (< 0.06)        -> running max keeps 0.06
    result = holm_bonferroni(p_values, alpha=0.05)
    assert list(result) == ["a", "b", "c", "d"]  # input order
    expected = {"a": (0.03, True), "b": (0.06, False), "c": (0.06, False), "d": (0.02, True)}
    for name, (adj, rejected) in expected.items():
        assert result[name][0] == pytest.approx(adj, abs=1e-12), name
        assert result[name][1] is rejected, name

    # a looser alpha rejects everything; a stricter one only d
    assert all(rej for _, rej in holm_bonferroni(p_values, alpha=0.06).values())
    assert [n for n, (_, rej) in holm_bonferroni(p_values, alpha=0.025).items() if rej] == ["d"]


def test_holm_bonferroni_clips_at_one_and_single_test():
    result = holm_bonferroni({"x": 0.6, "y": 0.7})
    assert result == {"x": (pytest.approx(1.0), False), "y": (pytest.approx(1.0), False)}
    # one test: no correction
    assert holm_bonferroni({"only": 0.03}) == {"only": (pytest.approx(0.03), True)}
    assert holm_bonferroni({}) == {}


def test_holm_bonferroni_monotone_and_never_below_raw():
    rng = random.Random(3)
    p_values = {f"t{i}": rng.random() ** 3 for i in range(25)}
    p_values["tie1"] = p_values["tie2"] = 0.002
    result = holm_bonferroni(p_values)
    ordered = sorted(p_values, key=p_values.get)
    adjusted = [result[name][0] for name in ordered]
    assert all(x <= y for x, y in zip(adjusted, adjusted[1:]))
    assert all(p_values[n] <= result[n][0] <= 1.0 for n in p_values)
    assert result["tie1"][0] == result["tie2"][0]
    # Holm is never more conservative than plain Bonferroni
    m = len(p_values)
    assert all(result[n][0] <= min(1.0, m * p_values[n]) + 1e-15 for n in p_values)


@pytest.mark.parametrize("bad_p", [-0.1, 1.5, float("nan")])
def test_holm_bonferroni_rejects_bad_p_values(bad_p):
    with pytest.raises(ValueError, match="p-value"):
        holm_bonferroni({"a": 0.01, "b": bad_p})


@pytest.mark.parametrize("bad_alpha", [0.0, 1.0, -0.05, 1.2])
def test_holm_bonferroni_rejects_bad_alpha(bad_alpha):
    with pytest.raises(ValueError, match="alpha"):
        holm_bonferroni({"a": 0.01}, alpha=bad_alpha)
