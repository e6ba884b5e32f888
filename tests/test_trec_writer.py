"""The TREC run writer (data/runs.py): every run we write goes through write_ranked_trec_run, which puts each line
together from byte tables (a score's text too) instead of formatting it. Its bytes must be those of the writer it
replaced (an f-string per line, Python's ``{:.6f}``), copied here as the reference, on inputs chosen to break it."""

from __future__ import annotations

import numpy as np
import pytest

from dense_encoders.data.embedding_shards import save_embedding_shards
from dense_encoders.data.runs import (
    RankedRun,
    _six_decimals,
    _table,
    _trec_bytes,
    write_ranked_trec_run,
    write_trec_run,
)
from dense_encoders.evaluation.shard_search import ranked_from_topk

# ------------------------------------------------------------------------------------- the reference writer


def reference_ranked(query_ids, doc_ids, scores, indices):
    """The search's run before the writer's rewrite (ranked_from_topk): per query the found documents, in row
    order, sorted by (-score, doc id) where two neighbours tie."""
    ranked = []
    for query_id, row_scores, row_indices in zip(query_ids, np.asarray(scores), np.asarray(indices)):
        found = row_indices >= 0
        pairs = [(doc_ids[i], s) for i, s in zip(row_indices[found].tolist(), row_scores[found].tolist())]
        if len(row_scores) > 1 and (row_scores[1:] == row_scores[:-1]).any():
            pairs.sort(key=lambda pair: (-pair[1], pair[0]))
        ranked.append((query_id, pairs))
    return ranked


def reference_text(ranked, tag="dense-encoders") -> str:
    """The lines of the replaced writer: one f-string per line."""
    return "".join(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n"
                   for query_id, pairs in ranked for rank, (doc_id, score) in enumerate(pairs, start=1))


def reference_run_text(run, tag="dense-encoders") -> str:
    """write_trec_run's lines before the rewrite: each query sorted by (-score, doc id)."""
    return reference_text([(query_id, sorted(documents.items(), key=lambda item: (-item[1], item[0])))
                           for query_id, documents in run.items()], tag)


def written(ranked: RankedRun, path, tag="dense-encoders") -> str:
    return write_ranked_trec_run(ranked, path, tag=tag).read_bytes().decode("utf-8")


# ------------------------------------------------------------------------------------- score texts


def assert_six_decimals(values) -> None:
    values = np.asarray(values)
    got = _trec_bytes([*_six_decimals(values), (_table(["\n"]), None)]).tobytes().decode().split("\n")[:-1]
    expected = [f"{value:.6f}" for value in values.tolist()]
    mismatches = [(v, g, e) for v, g, e in zip(values.tolist(), got, expected) if g != e]
    assert not mismatches, mismatches[:10]


def test_six_decimals_of_random_float32_bit_patterns_are_pythons():
    # every sign and exponent alike: bit patterns drawn at random (NaN, inf and huge values included)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    assert_six_decimals(bits.view(np.float32))
    # the range scores live in, densely: |s| < 1000, and around the rounding steps of the 6th decimal
    assert_six_decimals(rng.uniform(-1000, 1000, 100_000).astype(np.float32))
    assert_six_decimals(rng.normal(0, 0.1, 100_000).astype(np.float32))
    steps = (np.arange(-200_000, 200_000) * 1e-6 + 5e-7).astype(np.float32)  # the nearest float32s to x.5e-6
    assert_six_decimals(np.concatenate([steps, np.nextafter(steps, np.float32(np.inf)),
                                        np.nextafter(steps, np.float32(-np.inf))]))


def test_six_decimals_round_exact_ties_half_to_even_as_python_does():
    # a float32 s with s * 1e6 exactly half-way between integers is an odd multiple of 1/128 (1e6 = 2**6 * 5**6):
    # all of them below 1000 in magnitude, both signs
    ties = (2 * np.arange(128_000, dtype=np.float64) + 1) / 128
    ties = np.concatenate([ties, -ties]).astype(np.float32)
    assert ((ties.astype(np.float64) * 1e6) % 1 == 0.5).all()
    assert_six_decimals(ties)
    assert f"{0.0078125:.6f}" == "0.007812" and f"{0.0234375:.6f}" == "0.023438"  # half to even


def test_six_decimals_of_signed_zeros_edges_and_other_floats():
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    values = np.array([0.0, -0.0, 4e-7, -4e-7, -5e-7, 5e-7, -4.9999e-7, tiny, -tiny, 999.9999, -999.99994, 999.99996,
                       1000.0, -1000.0, 1e30, -3.4e38, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.25], np.float32)
    assert_six_decimals(values)
    assert [f"{v:.6f}" for v in (-0.0, np.float32(-4e-7))] == ["-0.000000", "-0.000000"]
    # float64 scores (a run dict's): those that are no float32 value are formatted by Python
    assert_six_decimals(np.array([0.1, 1 / 3, -1e-7, -0.0, 2.5e-7, 123.4567895, 1e20, np.nan, 0.0078125, 0.25]))
    assert_six_decimals(np.random.default_rng(1).normal(0, 10, 20_000))


# ------------------------------------------------------------------------------------- whole runs


def adversarial_topk(seed: int = 0):
    """A top-k of 12 queries over 40 documents built to break a writer: ids of every length, non-ASCII ones and one
    id at two positions; scores with ties (0.0 beside -0.0 among them), negatives, scores that print
    ``-0.000000``, half-way scores (odd multiples of 1/128); rows with FAISS's -1 padding, one with no document."""
    rng = np.random.default_rng(seed)
    doc_ids = ["d", "d10", "d2", "é", "文書-7", "a" * 40, "Z", "z", "0", "00", "x😀", "-", "--1"] + [
        f"doc{i}" for i in range(27)]
    doc_ids[39] = "d2"  # one id at two positions (never in the same query below)
    pool = np.array([0.5, 0.5, 0.0, -0.0, -4e-7, -4.9e-7, 4e-7, -1.25, 3 / 128, 5 / 128, -3 / 128, 1e-7, 2.0,
                     0.1, 0.1, 0.1, -0.0, 999.5, -0.3], np.float32)
    query_ids, all_scores, all_indices = [], [], []
    k = 15
    for query in range(12):
        # query 3 sees the repeated id at its second position (39), not at its first (2)
        documents = rng.permutation(np.r_[0:2, 3:40] if query == 3 else np.arange(39))[:k]
        scores = rng.choice(pool, size=k)
        order = np.lexsort((documents, -scores))  # a search's order: best first, ties by row
        scores, documents = scores[order], documents[order]
        found = 0 if query == 7 else k - (query % 4) * 3  # fewer than k: FAISS's padding at the end
        documents[found:], scores[found:] = -1, -np.finfo(np.float32).max
        query_ids.append("クエリ" if query == 5 else f"q{query}")
        all_scores.append(scores)
        all_indices.append(documents)
    return query_ids, doc_ids, np.stack(all_scores).astype(np.float32), np.stack(all_indices)


@pytest.mark.parametrize("seed", range(6))
def test_a_top_k_is_written_byte_for_byte_as_the_replaced_writer_wrote_it(tmp_path, seed):
    query_ids, doc_ids, scores, indices = adversarial_topk(seed)
    assert (scores[:, 1:] == scores[:, :-1]).any() and (indices == -1).any()
    expected = reference_text(reference_ranked(query_ids, doc_ids, scores, indices))
    from_rows = RankedRun.from_rows(query_ids, doc_ids, indices, scores)
    got = written(from_rows, tmp_path / "run.trec")
    assert got == expected
    assert "-0.000000" in got and " é " in got and " 文書-7 " in got and "0.023438" in got
    # the same through shards (whose ids never repeat): ids looked up once per document found (ids_at)
    shard_ids = doc_ids[:39] + ["d2-again"]
    shards = save_embedding_shards(tmp_path / "emb", np.zeros((len(shard_ids), 2), np.float32), shard_ids,
                                   shard_size=9)
    ranked = ranked_from_topk(query_ids, shards, scores, indices)
    assert written(ranked, tmp_path / "run2.trec") == reference_text(reference_ranked(query_ids, shard_ids, scores,
                                                                                      indices))
    assert ranked.counts.tolist() == [sum(row >= 0) for row in indices]
    # the dict of the same run, through write_trec_run
    run = {query_id: dict(pairs) for query_id, pairs in reference_ranked(query_ids, doc_ids, scores, indices)}
    assert write_trec_run(run, tmp_path / "run3.trec").read_text(encoding="utf-8") == expected
    assert from_rows.to_run() == run


def test_lines_written_in_many_blocks_are_the_same_bytes(tmp_path, monkeypatch):
    from dense_encoders.data import runs

    query_ids, doc_ids, scores, indices = adversarial_topk(1)
    expected = reference_text(reference_ranked(query_ids, doc_ids, scores, indices), tag="t")
    for budget in (1, 100, 1000):  # a line per block, a few lines, parts of queries
        monkeypatch.setattr(runs, "_BYTES_PER_WRITE", budget)
        assert written(RankedRun.from_rows(query_ids, doc_ids, indices, scores), tmp_path / "run.trec", "t") == expected


def test_a_run_dict_with_float64_scores_is_written_as_before(tmp_path):
    rng = np.random.default_rng(2)
    run = {f"q{q}": {f"d{int(d)}": float(s) for d, s in zip(rng.integers(0, 500, 60), rng.normal(0, 3, 60))}
           for q in range(30)}
    run["q0"].update({"t1": 0.1, "t2": 0.1, "t0": 0.1, "neg": -1e-7, "zero": -0.0, "big": 1e20, "half": 0.0078125})
    run["empty"] = {}
    for tag in ("dense-encoders", "mine"):
        path = write_trec_run(run, tmp_path / f"{tag}.trec", tag=tag)
        assert path.read_text(encoding="utf-8") == reference_run_text(run, tag)


def test_rows_that_are_not_best_first_are_sorted_whole(tmp_path):
    doc_ids = ["b", "a", "c", "d"]
    scores = np.array([[0.1, 0.9, 0.5, 0.5], [0.3, 0.2, 0.7, 0.0]], np.float32)
    indices = np.array([[0, 1, 2, 3], [-1, 0, 1, 2]])  # a score below a later one; a -1 before documents
    got = written(RankedRun.from_rows(["q1", "q2"], doc_ids, indices, scores), tmp_path / "run.trec")
    assert got.splitlines() == [
        "q1 Q0 a 1 0.900000 dense-encoders", "q1 Q0 c 2 0.500000 dense-encoders",
        "q1 Q0 d 3 0.500000 dense-encoders", "q1 Q0 b 4 0.100000 dense-encoders",
        "q2 Q0 a 1 0.700000 dense-encoders", "q2 Q0 b 2 0.200000 dense-encoders",
        "q2 Q0 c 3 0.000000 dense-encoders"]


@pytest.mark.parametrize("case", ["doc space", "doc tab", "empty doc", "query", "empty query", "tag"])
def test_ids_with_whitespace_or_empty_are_refused_before_anything_is_written(tmp_path, case):
    doc_ids = ["d1", "d 2" if case == "doc space" else "d\t2" if case == "doc tab" else "" if case == "empty doc"
               else "d2"]
    query_ids = ["q 1" if case == "query" else "" if case == "empty query" else "q1"]
    tag = "my tag" if case == "tag" else "t"
    ranked = RankedRun.from_rows(query_ids, doc_ids, np.array([[1, 0]]), np.array([[0.5, 0.25]], np.float32))
    with pytest.raises(ValueError, match="is empty or contains whitespace"):
        write_ranked_trec_run(ranked, tmp_path / "out" / "run.trec", tag=tag)
    assert not (tmp_path / "out").exists()
    # an id that no line uses is not the run's: refused only where it is used
    fine = RankedRun.from_rows(["q1"], ["d1", "d 2"], np.array([[0, -1]]), np.array([[0.5, -1.0]], np.float32))
    assert written(fine, tmp_path / "fine.trec") == "q1 Q0 d1 1 0.500000 dense-encoders\n"


@pytest.mark.parametrize("case", ["same row twice", "same id at two rows"])
def test_a_document_twice_in_one_query_is_refused_before_anything_is_written(tmp_path, case):
    doc_ids = ["d1", "d2", "d1"]
    indices = np.array([[0, 1, 1] if case == "same row twice" else [0, 1, 2], [1, 0, -1]])
    scores = np.array([[0.9, 0.5, 0.4], [0.9, 0.5, -np.inf]], np.float32)
    ranked = RankedRun.from_rows(["q1", "q2"], doc_ids, indices, scores)
    with pytest.raises(ValueError, match="query 'q1' lists a document twice"):
        write_ranked_trec_run(ranked, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()


def test_a_ranked_run_checks_its_arrays():
    with pytest.raises(ValueError, match="counts for"):
        RankedRun(["q1"], ["d1"], [0], [0.5], [1, 0])
    with pytest.raises(ValueError, match="for 2 lines"):
        RankedRun(["q1"], ["d1"], [0], [0.5], [2])
    with pytest.raises(ValueError, match="holds an id twice"):
        RankedRun(["q1"], ["d1", "d1"], [0], [0.5], [1])
    with pytest.raises(ValueError, match="must be in"):
        RankedRun(["q1"], ["d1"], [1], [0.5], [1])


def test_ids_at_answers_in_the_order_asked(tmp_path):
    ids = [f"p{i}" for i in range(23)]
    shards = save_embedding_shards(tmp_path / "emb", np.zeros((23, 2), np.float32), ids, shard_size=5)
    positions = [22, 0, 7, 7, 5, 4, 19]
    assert shards.ids_at(positions) == [ids[p] for p in positions]
    assert shards.ids_at([]) == []
    with pytest.raises(IndexError, match="holds 23"):
        shards.ids_at([3, 23])
