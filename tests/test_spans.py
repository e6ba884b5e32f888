"""Tests for coCondenser spans: split_into_spans, add_spans, CoCondenserCollator."""

import collections
import logging
import random

import datasets
import pytest
import torch

from dense_encoders.data import CoCondenserCollator, WholeWordMaskingCollator, add_spans, split_into_spans

IGNORE = -100


def reconstruct(input_ids, labels):
    return [lab if lab != IGNORE else inp for inp, lab in zip(input_ids, labels)]


def make_texts(tok, n_docs, seed=0):
    """Documents of single-token words with 0..400 tokens (so token count == word count)."""
    rng = random.Random(seed)
    vocab = [t for t in tok.convert_ids_to_tokens(list(range(2000, 4000))) if t.isalpha()]
    lengths = [0, 5, 30, 31, 400] + [rng.randint(1, 400) for _ in range(n_docs - 5)]
    return [" ".join(rng.choice(vocab) for _ in range(n)) for n in lengths]


# ----------------------------------------------------------------------------- split_into_spans


def check_spans(ids, spans, lo, hi):
    total = sum(len(s) for s in spans)
    assert [t for s in spans for t in s] == list(ids[:total])  # consecutive, non-overlapping prefix
    if len(ids) == 0:
        assert spans == []
    elif len(ids) < lo:
        assert spans == [list(ids)]  # a short document is one (short) span
    else:
        assert all(lo <= len(s) <= hi for s in spans)
        assert len(ids) - total < lo  # only a remainder shorter than min_span_tokens is dropped


def test_split_into_spans_properties():
    torch.manual_seed(0)
    for n in list(range(0, 60)) + [200, 333, 1000]:
        ids = list(range(1000, 1000 + n))
        for lo, hi in [(10, 20), (5, 5), (1, 3), (80, 128)]:
            check_spans(ids, split_into_spans(ids, lo, hi), lo, hi)


def test_split_into_spans_hand_computed():
    ids = list(range(12))
    # min == max: deterministic cut, remainder of 2 < 5 dropped
    assert split_into_spans(ids, 5, 5) == [list(range(5)), list(range(5, 10))]
    # remainder of 2 >= min 2 is kept
    assert split_into_spans(ids, 2, 2) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert split_into_spans(ids, 20, 30) == [ids]  # short doc: one span
    assert split_into_spans([], 1, 2) == []
    assert split_into_spans(torch.tensor([7, 8, 9]), 1, 1) == [[7], [8], [9]]


def test_split_into_spans_lengths_are_uniform():
    torch.manual_seed(0)
    lengths = collections.Counter()
    for _ in range(300):
        spans = split_into_spans(list(range(1000)), 3, 6)
        lengths.update(len(s) for s in spans[:-1])  # the last one may be a truncated remainder
    total = sum(lengths.values())
    assert set(lengths) == {3, 4, 5, 6}
    assert all(abs(c / total - 0.25) < 0.02 for c in lengths.values()), lengths


def test_split_into_spans_seeded():
    ids = list(range(500))
    torch.manual_seed(5)
    a = split_into_spans(ids, 10, 50)
    torch.manual_seed(5)
    assert split_into_spans(ids, 10, 50) == a
    assert split_into_spans(ids, 10, 50) != a
    gen_a = split_into_spans(ids, 10, 50, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(99)
    assert split_into_spans(ids, 10, 50, generator=torch.Generator().manual_seed(1)) == gen_a


@pytest.mark.parametrize(
    "lo, hi, match",
    [
        (0, 5, r"1 <= min_span_tokens <= max_span_tokens.*min_span_tokens=0, max_span_tokens=5"),
        (10, 5, r"min_span_tokens=10, max_span_tokens=5"),
        (2.5, 5, r"min_span_tokens must be an integer, got 2\.5"),
    ],
)
def test_split_into_spans_validation(lo, hi, match):
    with pytest.raises(ValueError, match=match):
        split_into_spans([1, 2, 3], lo, hi)


# ----------------------------------------------------------------------------- add_spans


def test_add_spans_dataset(tok, caplog):
    texts = make_texts(tok, 20)
    ds = datasets.Dataset.from_dict({"text": texts, "id": list(range(len(texts)))})
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="dense_encoders.data.spans"):
        out = add_spans(ds, tok, min_span_tokens=30, max_span_tokens=40)
    assert out.column_names == ["spans", "example_index"]
    token_lists = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    kept = [ids for ids in token_lists if len(ids) >= 60]  # >= 2 spans of >= 30 tokens
    assert len(out) == len(kept) and len(out) < len(texts)
    for ids, row in zip(kept, out):
        assert len(row["spans"]) >= 2
        check_spans(ids, row["spans"], 30, 40)
    assert f"dropped {len(texts) - len(kept)} of {len(texts)} documents" in caplog.text

    torch.manual_seed(0)
    keep_all = add_spans(ds, tok, min_span_tokens=30, max_span_tokens=40, drop_short=False)
    assert len(keep_all) == len(texts)
    assert [len(r) for r in keep_all["spans"][:4]] == [0, 1, 1, 1]  # 0, 5, 30, 31 tokens


def test_add_spans_streaming_matches_dataset(tok, tmp_path):
    texts = make_texts(tok, 15, seed=1)
    ds = datasets.Dataset.from_dict({"text": texts})
    path = tmp_path / "docs.jsonl"
    ds.to_json(str(path))
    streams = {
        "to_iterable": ds.to_iterable_dataset(),
        "load_dataset": datasets.load_dataset("json", data_files=str(path), split="train", streaming=True),
    }
    torch.manual_seed(42)
    expected = add_spans(ds, tok, 20, 50)["spans"]
    assert len(expected) > 5
    for name, stream in streams.items():
        lazy = add_spans(stream, tok, 20, 50)
        assert isinstance(lazy, datasets.IterableDataset), name
        torch.manual_seed(42)  # spans are drawn while iterating
        rows = list(lazy)
        assert all(set(r) == {"spans", "example_index"} for r in rows)
        assert [r["spans"] for r in rows] == expected, name


def test_seeded_add_spans_is_independent_of_global_rng_and_laziness(tok):
    texts = make_texts(tok, 12, seed=3)
    ds = datasets.Dataset.from_dict({"text": texts})
    torch.manual_seed(0)
    eager = add_spans(ds, tok, 20, 50, seed=5)
    torch.manual_seed(1)
    lazy = list(add_spans(ds.to_iterable_dataset(), tok, 20, 50, seed=5))
    assert [r["spans"] for r in lazy] == eager["spans"]
    assert eager["example_index"] == sorted(eager["example_index"])
    assert add_spans(ds, tok, 20, 50, seed=6)["spans"] != eager["spans"]


def test_seeded_cocondenser_batches_do_not_depend_on_batch_composition(tok):
    rows = [{"spans": [[2000 + 10 * d + k for k in range(6)] for _ in range(4)], "example_index": d} for d in range(4)]
    for row in rows:  # make every span of a document distinct
        row["spans"] = [[t + 1000 * j for t in span] for j, span in enumerate(row["spans"])]
    collator = CoCondenserCollator(tok, max_length=8, seed=3)
    whole = collator(rows)
    part = collator([rows[3], rows[1]])
    assert torch.equal(part["labels"][0:2], whole["labels"][6:8])
    assert torch.equal(part["input_ids"][2:4], whole["input_ids"][2:4])


def test_add_spans_file_backed_dataset_is_not_cached(tok, tmp_path):
    # a cache hit would silently ignore the seed
    datasets.Dataset.from_dict({"text": make_texts(tok, 8, seed=2)}).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    torch.manual_seed(0)
    a = add_spans(ds, tok, 10, 60)["spans"]
    torch.manual_seed(1)
    b = add_spans(ds, tok, 10, 60)["spans"]
    torch.manual_seed(0)
    c = add_spans(ds, tok, 10, 60)["spans"]
    assert a != b and a == c


def test_add_spans_validation(tok):
    ds = datasets.Dataset.from_dict({"body": ["a b c"]})
    with pytest.raises(ValueError, match=r"text_column 'text' is not a column of the dataset \(columns: \['body'\]\)"):
        add_spans(ds, tok)
    with pytest.raises(ValueError, match=r"min_span_tokens=9, max_span_tokens=8"):
        add_spans(ds, tok, 9, 8, text_column="body")


# ----------------------------------------------------------------------------- CoCondenserCollator


def disjoint_docs(n_docs, n_spans, span_len=20):
    """Doc d's span s holds ids 2000 + 1000*d + 100*s + [0, span_len): doc and span are readable from any id."""
    starts = [[2000 + 1000 * d + 100 * s for s in range(n_spans)] for d in range(n_docs)]
    return [{"spans": [list(range(start, start + span_len)) for start in doc]} for doc in starts]


def test_cocondenser_rows_are_sibling_span_pairs(tok):
    docs = disjoint_docs(3, 4)
    collator = CoCondenserCollator(tok, max_length=64)
    pairs = collections.Counter()
    torch.manual_seed(0)
    for _ in range(100):
        batch = collator(docs)
        assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
        assert batch["input_ids"].shape == (6, 22)
        spans_of_rows = []
        for row in range(6):
            inp = batch["input_ids"][row].tolist()
            lab = batch["labels"][row].tolist()
            assert inp[0] == tok.cls_token_id and inp[21] == tok.sep_token_id
            assert lab[0] == IGNORE and lab[21] == IGNORE
            tokens = reconstruct(inp[1:21], lab[1:21])
            doc, span = (tokens[0] - 2000) // 1000, (tokens[0] - 2000) % 1000 // 100
            assert tokens == docs[doc]["spans"][span]  # an untouched whole span
            assert sum(x != IGNORE for x in lab) == 3  # each span is masked (budget round(20 * .15))
            spans_of_rows.append((doc, span))
        for row in range(6):
            sibling = row ^ 1
            assert spans_of_rows[row][0] == row // 2 == spans_of_rows[sibling][0]  # same document, in order
            assert spans_of_rows[row][1] != spans_of_rows[sibling][1]  # two distinct spans
        pairs.update((spans_of_rows[2 * d][1], spans_of_rows[2 * d + 1][1]) for d in range(3))
    assert len(pairs) == 12  # every ordered pair of the 4 spans is sampled


def test_cocondenser_crops_and_matches_masking_collator_keys(tok):
    docs = disjoint_docs(2, 2, span_len=50)
    collator = CoCondenserCollator(tok, max_length=16, pad_to_multiple_of=8)
    torch.manual_seed(0)
    batch = collator(docs)
    ref = WholeWordMaskingCollator(tok, max_length=16)([{"input_ids": docs[0]["spans"][0]}])
    assert set(batch) == set(ref)
    assert batch["input_ids"].shape == (4, 16)
    for row in range(4):
        tokens = reconstruct(batch["input_ids"][row, 1:15].tolist(), batch["labels"][row, 1:15].tolist())
        assert tokens == list(range(tokens[0], tokens[0] + 14))  # one contiguous crop of a span


def test_cocondenser_global_rng_reproducible(tok):
    docs = disjoint_docs(2, 5)
    collator = CoCondenserCollator(tok, max_length=32)
    torch.manual_seed(7)
    a = collator(docs)
    torch.manual_seed(7)
    b = collator(docs)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_cocondenser_errors(tok):
    collator = CoCondenserCollator(tok)
    docs = disjoint_docs(2, 2)
    docs[1]["spans"] = docs[1]["spans"][:1]
    with pytest.raises(
        ValueError,
        match=r"example 1 has 1 span\(s\) but coCondenser needs 2.*"
        r"add_spans\(\.\.\., drop_short=True\).*min_span_tokens",
    ):
        collator(docs)
    with pytest.raises(ValueError, match=r"example 0 has no 'spans' \(found \['input_ids'\]\).*add_spans"):
        collator([{"input_ids": [1, 2]}])
    with pytest.raises(ValueError, match=r"mlm_probability.*got 2"):
        CoCondenserCollator(tok, mlm_probability=2)
