"""Corpus-scale encoding and search: shards equal the in-memory encoding, two torchrun processes equal one,
a killed run resumes to the same bytes, streamed search equals the harness's search, FAISS indexes agree
with exact search, manifests refuse mismatches, and memory does not grow with the corpus."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, cpu_only_env
from transformers import BertConfig, BertModel

from dense_encoders.cli import main
from dense_encoders.data.embedding_shards import (
    EmbeddingShards,
    iterate_texts,
    save_embedding_shards,
    shard_folder_files,
    text_source,
)
from dense_encoders.data.format import DataFormatError
from dense_encoders.data.runs import read_trec_run, write_trec_run
from dense_encoders.evaluation.corpus_encoding import encode_corpus, my_shards
from dense_encoders.evaluation.encoding import RetrievalEncoder
from dense_encoders.evaluation.search import exact_search
from dense_encoders.evaluation.shard_search import (
    build_faiss_index,
    open_faiss_index,
    search_faiss_index,
    search_shards,
)

WORDS = "dense passage query encoder retrieval ranking river mountain protein enzyme music bridge".split()


def tiny_model(folder: Path, tok, seed: int = 0, max_position_embeddings: int = 32) -> Path:
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=max_position_embeddings)
    BertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="mean", similarity="cosine")
    return folder


def write_corpus(path: Path, count: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))
            handle.write(json.dumps({"_id": f"d{i}", "title": rng.choice(["", "a title"]), "text": text}) + "\n")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory, tok) -> Path:
    return tiny_model(tmp_path_factory.mktemp("model") / "tiny", tok)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", 230)


def stored(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def all_embeddings(shards: EmbeddingShards) -> tuple[np.ndarray, list[str]]:
    parts, ids = [], []
    for _, embeddings, shard_ids in shards.shards():
        parts.append(embeddings)
        ids += shard_ids
    return np.concatenate(parts), ids


def eleven_significant_bits(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to float16's precision (11 significant bits, ties to even) with an unbounded exponent:
    what a float16 shard must give back whatever the magnitudes (a plain float16 cast also flushes values below
    6.1e-5 towards zero and turns values above 65504 into inf)."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))  # mantissa in [0.5, 1)
    return np.ldexp(np.rint(mantissa * 2.0**11), exponent - 11).astype(np.float32)


# ---- encoding ----------------------------------------------------------------------------------------


def test_shards_equal_the_in_memory_encoding(model, corpus, tmp_path):
    shards = encode_corpus(model, corpus, tmp_path / "emb", shard_size=50, dtype="float32", batch_size=8,
                           show_progress_bar=False)
    assert (shards.count, len(shards), shards.dimension) == (230, 5, 16)
    assert [entry["rows"] for entry in shards.manifest["shards"]] == [50, 50, 50, 50, 30]
    embeddings, ids = all_embeddings(shards)
    texts = list(iterate_texts(text_source(corpus)))
    assert ids == [identifier for identifier, _ in texts] == [f"d{i}" for i in range(230)]
    reference = RetrievalEncoder(model, batch_size=8, show_progress_bar=False).encode_documents(
        [text for _, text in texts]).embeddings
    np.testing.assert_allclose(embeddings, reference, rtol=0, atol=1e-6)
    settings = shards.settings
    assert (settings["side"], settings["dtype"], settings["shard_size"], settings["count"]) == ("document", "float32",
                                                                                             50, 230)
    assert settings["source"]["sha256"] and settings["fingerprint"] and settings["max_length"] == 32
    half = encode_corpus(model, corpus, tmp_path / "emb16", shard_size=50, batch_size=8, show_progress_bar=False)
    stored16, _ = all_embeddings(half)  # float16 by default: the float32 values rounded to float16's 11 bits
    np.testing.assert_array_equal(stored16, eleven_significant_bits(embeddings))


# characters and tokens disagree: long one-token words against single letters
BY_TOKENS_NOT_CHARACTERS = {
    "t1": "a b c d e f g h",  # 15 characters, 10 tokens with [CLS] / [SEP]
    "t2": "international government university television information development association",  # 82, 9
    "t3": "international government",  # 24, 4
    "t4": "a",  # 1, 3
}


def test_encode_batches_texts_by_their_number_of_tokens(model, tok, tmp_path, monkeypatch):
    """`encode` pads each batch to little more than its texts: the texts sorted by tokens (longest first), not by
    characters (sentence-transformers' own order, which batches t2 with t3 and t1 with t4 here: 38 tokens for 26)."""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"{identifier}\t{text}\n" for identifier, text in BY_TOKENS_NOT_CHARACTERS.items()))
    seen = []
    forward = BertModel.forward

    def recording(self, *args, **kwargs):
        seen.append(sorted(kwargs["attention_mask"].sum(dim=1).tolist(), reverse=True))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BertModel, "forward", recording)
    assert main(["encode", str(model), str(corpus), "--output", str(tmp_path / "emb"), "--batch-size", "2",
                 "--dtype", "float32", "--no-progress"]) == 0
    counts = sorted((len(tok(text)["input_ids"]) for text in BY_TOKENS_NOT_CHARACTERS.values()), reverse=True)
    assert seen == [counts[0:2], counts[2:4]] == [[10, 9], [4, 3]]
    monkeypatch.setattr(BertModel, "forward", forward)
    embeddings, ids = all_embeddings(EmbeddingShards.open(tmp_path / "emb"))
    assert ids == list(BY_TOKENS_NOT_CHARACTERS)
    reference = RetrievalEncoder(model, batch_size=2, show_progress_bar=False).encode_documents(
        list(BY_TOKENS_NOT_CHARACTERS.values())).embeddings
    np.testing.assert_allclose(embeddings, reference, rtol=0, atol=1e-6)


def test_float16_shards_keep_every_magnitude(tmp_path):
    """A float16 shard gives back each value rounded to 11 significant bits, for rows of about 1e-9 (below
    float16's smallest subnormal), 1e-6 (subnormal), 1 and 1e6 (past float16's largest value), and a zero row."""
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((5, 24)).astype(np.float32) * np.array([1e-9, 1e-6, 1.0, 1e6, 0.0],
                                                                     dtype=np.float32)[:, None]
    shards = save_embedding_shards(tmp_path / "emb", rows, [f"d{i}" for i in range(5)], shard_size=2,
                                   dtype="float16")
    stored, _ = all_embeddings(shards)
    np.testing.assert_array_equal(stored, eleven_significant_bits(rows))
    assert np.all(np.abs(stored - rows) <= 2.0**-11 * np.abs(rows))  # float16's relative precision, every row


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_shard_is_read_once_into_the_arrays_safetensors_reads(tmp_path, dtype):
    """shards() reads each file once, hashes those bytes and views its tensors in them (safetensors_arrays): the
    same arrays and metadata as safetensors' reader; a header that is not safetensors' is a one-line error."""
    from safetensors import safe_open

    from dense_encoders.data.embedding_shards import read_file_bytes, read_shard, safetensors_arrays, shard_file

    rows = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    shards = save_embedding_shards(tmp_path / "emb", rows, [f"d{i}" for i in range(7)], shard_size=4, dtype=dtype)
    for index in range(2):
        path = shard_file(shards.folder, index)
        metadata, tensors = safetensors_arrays(read_file_bytes(path))
        with safe_open(str(path), framework="np") as handle:
            assert metadata == handle.metadata() and sorted(tensors) == sorted(handle.keys())
            for name, array in tensors.items():
                expected = handle.get_tensor(name)
                assert array.dtype == expected.dtype and array.flags.writeable
                np.testing.assert_array_equal(array, expected)
    stored, _ = all_embeddings(shards)
    np.testing.assert_array_equal(stored, rows if dtype == "float32" else eleven_significant_bits(rows))
    data = read_file_bytes(shard_file(shards.folder, 0))
    for bad in (data[:5], np.concatenate([np.frombuffer((10**9).to_bytes(8, "little"), np.uint8), data[8:]]),
                np.concatenate([data[:8], np.frombuffer(b"[]" + b" " * (int(data[:8].view("<u8")[0]) - 2), np.uint8),
                                data[8 + int(data[:8].view("<u8")[0]):]])):
        with pytest.raises(ValueError, match=r"shard-00000.safetensors cannot be read \(.*\): run the") as error:
            read_shard(shards.folder, 0, data=bad)
        assert "\n" not in str(error.value)


def small_vector_model(folder: Path, tok, scale: float) -> Path:
    """:func:`tiny_model` with its last LayerNorm multiplied by ``scale`` (vectors of about ``scale``), scored by
    dot product, without a Normalize module."""
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    tiny_model(folder, tok)
    bert = BertModel.from_pretrained(folder)
    norm = bert.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        norm.weight.mul_(scale)
        norm.bias.mul_(scale)
    bert.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="mean", similarity="dot", normalize=False)
    return folder


def test_float16_shards_of_a_model_with_tiny_vectors_evaluate_as_in_memory(tok, tmp_path):
    """A model whose vectors are about 1e-6 (float16's subnormal range): `evaluate --corpus-embeddings` on the
    default float16 shards gives the metrics of the in-memory evaluation. The relevant documents are those whose
    in-memory score stands apart from every other document's by more than float16 rounding can move it."""
    model = small_vector_model(tmp_path / "small", tok, 1e-6)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", 120)
    queries = {f"q{i}": f"{WORDS[i]} {WORDS[i + 1]}" for i in range(8)}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    documents = list(iterate_texts(text_source(beir)))
    encoder = RetrievalEncoder(model, show_progress_bar=False)
    q = encoder.encode_queries(list(queries.values())).embeddings.astype(np.float64)
    d = encoder.encode_documents([text for _, text in documents]).embeddings.astype(np.float64)
    assert 1e-7 < np.abs(d).max() < 1e-5
    scores = q @ d.T
    # float16 moves a score by at most 2**-11 * |q| * |d|, a gap between two scores by twice that: 2**-9 is room
    margin = 2.0**-9 * np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(d, axis=1).max()
    lines = []
    for row, (query, row_scores) in enumerate(zip(queries, scores)):
        gaps = np.abs(row_scores[:, None] - row_scores[None, :])
        np.fill_diagonal(gaps, np.inf)
        apart = [int(j) for j in np.argsort(-row_scores)[:10] if gaps[j].min() > margin[row, 0]]
        assert len(apart) >= 2, (query, apart)
        lines += [f"{query}\t{documents[apart[0]][0]}\t2\n", f"{query}\t{documents[apart[1]][0]}\t1\n"]
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))

    emb = tmp_path / "emb"
    assert main(["encode", str(model), str(beir), "--output", str(emb), "--no-progress"]) == 0  # float16
    assert EmbeddingShards.open(emb).settings["dtype"] == "float16"
    memory, stored = tmp_path / "memory.json", tmp_path / "stored.json"
    assert main(["evaluate", str(model), str(beir), "--output", str(memory), "--no-progress"]) == 0
    assert main(["evaluate", str(model), str(beir), "--output", str(stored), "--corpus-embeddings", str(emb),
                 "--no-progress"]) == 0
    in_memory, from_shards = json.loads(memory.read_text()), json.loads(stored.read_text())
    assert in_memory["metrics"]["ndcg@10"] > 0.5
    assert from_shards["metrics"] == pytest.approx(in_memory["metrics"], abs=1e-12)
    for measure, values in in_memory["per_query"].items():
        assert from_shards["per_query"][measure] == pytest.approx(values, abs=1e-12), measure


def test_float16_shards_of_version_1_warn_about_rows_they_flushed(tmp_path, caplog):
    """A version-1 float16 shard (a plain cast, no scales) is still read, with a warning naming the rows that
    lie below float16's normal range."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from dense_encoders.data.embedding_shards import file_sha256, shard_file

    rows = np.array([[1e-6, -2e-6], [0.5, 0.25], [3e-9, 0.0]], dtype=np.float32)
    shards = save_embedding_shards(tmp_path / "emb", rows, ["a", "b", "c"], dtype="float16")
    path = shard_file(shards.folder, 0)
    with safe_open(str(path), framework="np") as handle:  # the shard's metadata (rows, ids digest) is kept
        assert "scales" in handle.keys()
        metadata = handle.metadata()
    save_file({"embeddings": rows.astype(np.float16)}, str(path), metadata=metadata)
    manifest = json.loads((shards.folder / "manifest.json").read_text())
    manifest["version"] = manifest["settings"]["version"] = 1
    manifest["shards"][0].update(bytes=path.stat().st_size, sha256=file_sha256(path))
    (shards.folder / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING"):
        stored, _ = all_embeddings(EmbeddingShards.open(shards.folder))
    np.testing.assert_array_equal(stored, rows.astype(np.float16).astype(np.float32))
    assert "2 of 3 rows lie below float16's normal range" in caplog.text


def test_tsv_and_txt_sources_and_blank_texts(tmp_path):
    tsv = tmp_path / "collection.tsv"
    tsv.write_text("7\tfirst passage\n9\tsecond passage\n\n12\tthird\n", encoding="utf-8")
    assert list(iterate_texts(text_source(tsv))) == [("7", "first passage"), ("9", "second passage"), ("12", "third")]
    lines = tmp_path / "texts.txt"
    lines.write_text("alpha\nbeta\n\ngamma\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"texts.txt:3: blank document '3'"):
        list(iterate_texts(text_source(lines)))
    assert list(iterate_texts(text_source(lines), allow_empty=True))[2:] == [("3", ""), ("4", "gamma")]
    (tmp_path / "beir").mkdir()
    (tmp_path / "beir" / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a question"}) + "\n")
    assert list(iterate_texts(text_source(tmp_path / "beir", "query"))) == [("q1", "a question")]
    with pytest.raises(FileNotFoundError, match="has no corpus.jsonl"):
        text_source(tmp_path / "beir")


def test_ranks_take_contiguous_slices_of_the_shards():
    assert [list(my_shards(5, rank, 2)) for rank in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(my_shards(2, rank, 4)) for rank in range(4)] == [[0], [1], [], []]
    assert sorted(i for rank in range(3) for i in my_shards(10, rank, 3)) == list(range(10))


@pytest.mark.numerics
def test_two_torchrun_processes_equal_one(model, corpus, tmp_path):
    one = encode_corpus(model, corpus, tmp_path / "one", shard_size=50, dtype="float32", batch_size=8,
                        show_progress_bar=False)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
               "-m", "dense_encoders.cli", "encode", str(model), str(corpus), "--output", str(tmp_path / "two"),
               "--shard-size", "50", "--dtype", "float32", "--batch-size", "8", "--no-progress"]
    done = subprocess.run(command, cwd=tmp_path, env=cpu_only_env(PYTHONPATH=str(Path(REPO_ROOT) / "src")),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two = EmbeddingShards.open(tmp_path / "two")
    (a, ids_a), (b, ids_b) = all_embeddings(one), all_embeddings(two)
    assert ids_a == ids_b
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # different thread counts may round differently
    assert two.settings["fingerprint"] == one.settings["fingerprint"]


@pytest.mark.slow
def test_one_process_driving_several_devices_equals_one_device(model, corpus, tmp_path):
    """--devices: sentence-transformers' multi-process pool (two CPU workers here) gives the same shards."""
    one = encode_corpus(model, corpus, tmp_path / "one", shard_size=100, dtype="float32", batch_size=8,
                        show_progress_bar=False)
    pooled = encode_corpus(model, corpus, tmp_path / "pool", shard_size=100, dtype="float32", batch_size=8,
                           devices=["cpu", "cpu"], show_progress_bar=False)
    (a, ids_a), (b, ids_b) = all_embeddings(one), all_embeddings(pooled)
    assert ids_a == ids_b
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


KILL_AFTER_TWO_SHARDS = """
import os, signal, sys
from dense_encoders.evaluation import corpus_encoding
written = []
original = corpus_encoding.write_shard
def write_then_die(*args, **kwargs):
    original(*args, **kwargs)
    written.append(args[1])
    if len(written) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
corpus_encoding.write_shard = write_then_die
corpus_encoding.encode_corpus(sys.argv[1], sys.argv[2], sys.argv[3], shard_size=40, batch_size=8,
                              show_progress_bar=False)
"""


def test_a_killed_run_resumes_to_the_same_bytes(model, corpus, tmp_path):
    reference = encode_corpus(model, corpus, tmp_path / "whole", shard_size=40, batch_size=8, show_progress_bar=False)
    output = tmp_path / "killed"
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_SHARDS, str(model), str(corpus), str(output)],
                            env=cpu_only_env(PYTHONPATH=str(Path(REPO_ROOT) / "src")), capture_output=True, timeout=300)
    assert killed.returncode == -9
    assert not (output / "manifest.json").exists()
    assert sorted(p.name for p in output.glob("shard-*.safetensors")) == ["shard-00000.safetensors",
                                                                           "shard-00001.safetensors"]
    with pytest.raises(FileNotFoundError, match="unfinished run: run the same `dense-encoders encode` command"):
        EmbeddingShards.open(output)
    (output / ".shard-00002.safetensors.x.tmp").write_bytes(b"half a shard")  # debris of a write cut short
    resumed = encode_corpus(model, corpus, output, shard_size=40, batch_size=8, show_progress_bar=False)
    assert resumed.count == reference.count
    (output / ".shard-00002.safetensors.x.tmp").unlink()
    whole, again = stored(tmp_path / "whole"), stored(output)
    assert whole.keys() == again.keys()
    for name in whole:
        if name not in ("manifest.json", "encoding.json"):
            assert whole[name] == again[name], name
    manifest = json.loads(again["manifest.json"])
    assert manifest["shards"] == json.loads(whole["manifest.json"])["shards"]  # same files, same sha256
    # a finished folder: running again changes nothing
    encode_corpus(model, corpus, output, shard_size=40, batch_size=8, show_progress_bar=False)
    assert stored(output)["manifest.json"] == again["manifest.json"]


def test_a_run_of_the_version_that_batched_by_characters_is_not_continued(model, corpus, tmp_path, capsys):
    # shards batched otherwise differ in their last bits: a folder whose encoding.json records no batch_order
    # (written before texts were batched by tokens) is refused, never continued with differently batched shards
    output = tmp_path / "old"
    encode_corpus(model, corpus, output, shard_size=40, batch_size=8, show_progress_bar=False)
    settings = json.loads((output / "encoding.json").read_text())
    assert settings["batch_order"] == "tokens"
    del settings["batch_order"]
    (output / "encoding.json").write_text(json.dumps(settings))
    (output / "manifest.json").unlink()
    (output / "shard-00002.safetensors").unlink()  # unfinished
    before = stored(output)
    assert main(["encode", str(model), str(corpus), "--output", str(output), "--shard-size", "40", "--batch-size",
                 "8", "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1:]  # after transformers' loading bar
    assert error == [f"dense-encoders encode: error: {output} was encoded by an earlier version, which batched the "
                     "texts by characters: its shards still serve search and evaluate, but this version cannot "
                     "continue them bit for bit; give a new --output"]
    assert stored(output) == before


def test_manifest_mismatches_are_refused(model, corpus, tok, tmp_path, capsys):
    output = tmp_path / "emb"
    argv = ["encode", str(model), str(corpus), "--output", str(output), "--shard-size", "100", "--no-progress"]
    assert main(argv) == 0
    other_model = tiny_model(tmp_path / "other", tok, seed=1)
    cases = [
        (["encode", str(other_model), *argv[2:]], "fingerprint"),
        ([*argv, "--max-length", "8"], "max_length: 32 -> 8"),
        ([*argv[:-3], "--shard-size", "50", "--no-progress"], "shard_size: 100 -> 50"),
        ([*argv, "--dtype", "float32"], "dtype: float16 -> float32"),
        ([*argv, "--prompt", "passage: "], "prompt"),
    ]
    for case, problem in cases:
        capsys.readouterr()
        assert main(case) == 2, case
        err = capsys.readouterr().err
        assert "holds a run with other settings" in err and problem in err and err.count("\n") <= 2, err
    changed = write_corpus(tmp_path / "changed.jsonl", 230, seed=5)
    assert main(["encode", str(model), str(changed), *argv[3:]]) == 2
    assert "source_sha256" in capsys.readouterr().err
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert main(["encode", str(model), str(corpus), "--output", str(stray)]) == 2
    assert "is not empty and holds no encoding.json" in capsys.readouterr().err
    # queries encoded by another model cannot be searched against this corpus
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": WORDS[i]}) + "\n" for i in range(5)))
    assert main(["encode", str(other_model), str(queries), "--queries", "--output", str(tmp_path / "q"),
                 "--no-progress"]) == 0
    assert main(["search", str(output), str(tmp_path / "q"), "--output", str(tmp_path / "run.trec")]) == 2
    assert "were encoded differently (fingerprint" in capsys.readouterr().err
    assert main(["search", str(output), str(output), "--output", str(tmp_path / "run.trec")]) == 2
    assert "holds document embeddings: encode the queries" in capsys.readouterr().err


# ---- lengths past the model's positions; a run that wrote no shard (issue 35, item 10) ------------------

POSITIONS = 16


def long_texts(path: Path, count: int = 6) -> Path:
    """BEIR corpus and queries whose texts are all longer than POSITIONS tokens."""
    (path / "qrels").mkdir(parents=True)
    rng = random.Random(3)
    texts = [" ".join(rng.choice(WORDS) for _ in range(30 + 5 * i)) for i in range(count)]
    (path / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                                               for i, text in enumerate(texts)))
    (path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": texts[i][:150]}) + "\n"
                                                for i in range(3)))
    (path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                                      for i in range(3)))
    return path


def truncated_mean_pooling(model: Path, texts: list[str], max_length: int) -> np.ndarray:
    """The folder's pipeline (mean pooling, unit vectors) by hand, on texts cut to ``max_length`` tokens."""
    from transformers import AutoTokenizer

    tokenizer, encoder = AutoTokenizer.from_pretrained(model), BertModel.from_pretrained(model).eval()
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    pooled = (states * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_a_max_length_past_the_positions_is_brought_down_to_them(tok, tmp_path, capsys, caplog):
    short = tiny_model(tmp_path / "short", tok, max_position_embeddings=POSITIONS)
    beir = long_texts(tmp_path / "beir")
    texts = [json.loads(line)["text"] for line in (beir / "corpus.jsonl").read_text().splitlines()]
    assert min(len(tok(text)["input_ids"]) for text in texts) > POSITIONS
    capsys.readouterr()
    assert main(["encode", str(short), str(beir), "--output", str(tmp_path / "emb"), "--max-length", "100000",
                 "--dtype", "float32", "--no-progress"]) == 0
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"the document length 100000 exceeds the model's {POSITIONS} positions (max_position_embeddings): "
        f"using {POSITIONS}"]
    caplog.clear()
    shards = EmbeddingShards.open(tmp_path / "emb")
    assert shards.settings["max_length"] == POSITIONS
    embeddings, ids = all_embeddings(shards)
    assert ids == [f"d{i}" for i in range(len(texts))]
    np.testing.assert_allclose(embeddings, truncated_mean_pooling(short, texts, POSITIONS), atol=1e-5)
    # evaluate: the same clamp on both sides, so the same results as with the model's own length
    results = {}
    for name, length in (("past", "100000"), ("own", str(POSITIONS))):
        output = tmp_path / f"{name}.json"
        assert main(["evaluate", str(short), str(beir), "--document-max-length", length, "--query-max-length", length,
                     "--output", str(output), "--no-progress"]) == 0
        results[name] = json.loads(output.read_text())
    warnings = [r.getMessage() for r in caplog.records if "exceeds the model's" in r.getMessage()]
    assert sorted(warning.split(" 100000")[0] for warning in warnings) == ["the document length", "the query length"]
    assert results["past"]["metrics"] == results["own"]["metrics"]
    assert results["past"]["settings"]["max_lengths"] == {"query": POSITIONS, "document": POSITIONS}


def test_a_run_that_wrote_no_shard_does_not_block_its_retry(model, corpus, tmp_path, capsys, monkeypatch):
    from dense_encoders.evaluation import corpus_encoding

    encode_shards = corpus_encoding._encode_sorted

    def fail(*args, **kwargs):
        raise ValueError("the device failed before the first shard")

    output = tmp_path / "emb"
    argv = ["encode", str(model), str(corpus), "--output", str(output), "--shard-size", "100", "--no-progress"]
    monkeypatch.setattr(corpus_encoding, "_encode_sorted", fail)
    assert main([*argv, "--max-length", "8"]) == 2
    assert (output / "encoding.json").is_file() and not list(output.glob("shard-*"))
    monkeypatch.setattr(corpus_encoding, "_encode_sorted", encode_shards)
    capsys.readouterr()
    assert main([*argv, "--max-length", "12"]) == 0  # the corrected command: not "holds a run with other settings"
    assert "other settings" not in capsys.readouterr().err
    assert main(["encode", str(model), str(corpus), "--output", str(tmp_path / "fresh"), "--shard-size", "100",
                 "--no-progress", "--max-length", "12"]) == 0
    assert stored(output) == stored(tmp_path / "fresh")
    # once a shard is written, another setting is still refused
    shards_written = []

    def fail_after_one(*args, **kwargs):
        if shards_written:
            raise ValueError("the device failed after the first shard")
        shards_written.append(True)
        return encode_shards(*args, **kwargs)

    partial = tmp_path / "partial"
    monkeypatch.setattr(corpus_encoding, "_encode_sorted", fail_after_one)
    assert main([*argv[:4], str(partial), *argv[5:], "--max-length", "8"]) == 2
    assert [p.name for p in partial.glob("shard-*.safetensors")] == ["shard-00000.safetensors"]
    monkeypatch.setattr(corpus_encoding, "_encode_sorted", encode_shards)
    capsys.readouterr()
    assert main([*argv[:4], str(partial), *argv[5:], "--max-length", "12"]) == 2
    assert "holds a run with other settings (max_length: 8 -> 12)" in capsys.readouterr().err


# ---- search ------------------------------------------------------------------------------------------


def clustered(count: int, dim: int, clusters: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tight, well separated clusters (about count / clusters members each) and one query per cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32) * 4
    members = np.arange(count) % clusters
    points = centres[members] + 0.05 * rng.normal(size=(count, dim)).astype(np.float32)
    queries = centres + 0.05 * rng.normal(size=(clusters, dim)).astype(np.float32)
    return points, queries


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_streamed_search_equals_the_in_memory_search(tmp_path, similarity):
    rng = np.random.default_rng(0)
    documents = rng.normal(size=(1000, 12)).astype(np.float32)
    documents[500] = documents[20]  # a tie: the lower index comes first in both
    queries = rng.normal(size=(37, 12)).astype(np.float32)
    shards = save_embedding_shards(tmp_path / "s", documents, [f"d{i}" for i in range(1000)], shard_size=256,
                                   settings={"similarity": similarity})
    for k, chunk in ((10, 128), (300, 64), (1000, 256)):
        streamed = search_shards(queries, shards, k, document_chunk_size=chunk, query_chunk_size=16)
        reference = exact_search(queries, documents, k, similarity=similarity, document_chunk_size=chunk,
                                 query_chunk_size=16)
        assert torch.equal(streamed[1], reference[1]) and torch.equal(streamed[0], reference[0])


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_the_streamed_search_holds_one_shard_at_a_time(tmp_path, similarity):
    """numpy's allocations (tracemalloc) while four float16 shards are searched: one shard's file bytes and
    decoded rows (6 bytes a value) at a time, not the previous one's beside the next's (12 bytes a value)."""
    import tracemalloc

    rows, dim = 4096, 256
    documents = np.random.default_rng(0).normal(size=(4 * rows, dim)).astype(np.float32)
    shards = save_embedding_shards(tmp_path / "s", documents, [f"d{i}" for i in range(4 * rows)], shard_size=rows,
                                   dtype="float16", settings={"similarity": similarity})
    one_shard = rows * dim * (2 + 4)
    search_shards(documents[:8], shards, 10)  # the imports a first search makes are not its memory
    tracemalloc.start()
    try:
        search_shards(documents[:8], shards, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert one_shard < peak < 1.5 * one_shard, (peak, one_shard)


@pytest.mark.parametrize("corpus_kind", ["exact", "faiss"])
def test_the_search_commands_run_file_is_the_run_dict_written_as_every_run_is(tmp_path, corpus_kind):
    # search writes straight from the top-k (ranked_from_topk + write_ranked_trec_run); the bytes must be those of
    # the run dict {query: {doc: score}} built by hand and written by write_trec_run (descending score, ties by
    # doc id). Integer vectors make most scores tie, and the ids' string order is not the row order ("d10" < "d2").
    rng = np.random.default_rng(3)
    documents = rng.integers(-1, 2, size=(300, 4)).astype(np.float32)
    queries = rng.integers(-1, 2, size=(9, 4)).astype(np.float32)
    ids = [f"d{i}" for i in range(300)]
    shards = save_embedding_shards(tmp_path / "emb", documents, ids, shard_size=70, settings={"similarity": "dot"})
    save_embedding_shards(tmp_path / "q", queries, [f"q{i}" for i in range(9)], shard_size=70,
                          settings={"similarity": "dot", "side": "query"})
    corpus = tmp_path / "emb"
    if corpus_kind == "faiss":
        corpus = build_faiss_index(shards, "Flat", tmp_path / "flat.faiss")
    k = 400 if corpus_kind == "faiss" else 40  # past the corpus: FAISS pads with -1
    assert main(["search", str(corpus), str(tmp_path / "q"), "--k", str(k), "--output", str(tmp_path / "run.trec"),
                 "--no-progress"]) == 0
    if corpus_kind == "faiss":
        index, record, _ = open_faiss_index(corpus)
        scores, indices = search_faiss_index(index, record, queries, k)
    else:
        scores, indices = exact_search(queries, documents, k, similarity="dot")
    by_hand = {f"q{row}": {ids[int(i)]: float(s) for s, i in zip(np.asarray(scores[row]), np.asarray(indices[row]))
                           if i >= 0} for row in range(9)}
    assert len(by_hand["q0"]) == min(k, 300)
    write_trec_run(by_hand, tmp_path / "by_hand.trec", tag="dense-encoders")
    assert (tmp_path / "run.trec").read_bytes() == (tmp_path / "by_hand.trec").read_bytes()


def test_faiss_flat_equals_exact_and_ivfpq_reaches_recall(tmp_path):
    points, queries = clustered(6000, 16, 60)
    shards = save_embedding_shards(tmp_path / "s", points, [f"d{i}" for i in range(len(points))], shard_size=1000)
    scores, indices = search_shards(queries, shards, 100, similarity="dot")
    flat, record, documents = open_faiss_index(build_faiss_index(shards, "Flat", tmp_path / "flat.faiss"))
    assert documents.folder == shards.folder and record["count"] == 6000
    flat_scores, flat_indices = search_faiss_index(flat, record, queries, 100)
    # the same ranking up to rounding: equal scores rank by rank, and the same documents except those
    # within rounding of the 100th score (BLAS kernels differ between FAISS and torch)
    tolerance = 1e-5 * float(np.abs(scores.numpy()).max())
    np.testing.assert_allclose(flat_scores, scores.numpy(), rtol=0, atol=tolerance)
    for row in range(len(queries)):
        clear = scores[row].numpy() > scores[row, -1].item() + tolerance
        assert set(indices[row].numpy()[clear]) <= set(flat_indices[row]), row
    assert (flat_indices == indices.numpy()).mean() > 0.9
    path = build_faiss_index(shards, "IVF16,PQ8", tmp_path / "ivfpq.faiss", train_size=3000)
    index, record, _ = open_faiss_index(path)
    _, approximate = search_faiss_index(index, record, queries, 100, nprobe=4)
    recall = np.mean([len(set(approximate[row]) & set(indices[row].tolist())) / 100 for row in range(len(queries))])
    assert recall >= 0.95, recall
    with pytest.raises(ValueError, match="not a FAISS index_factory string"):
        build_faiss_index(shards, "NoSuchIndex", tmp_path / "bad.faiss")
    with pytest.raises(ValueError, match="--nprobe applies to IVF indexes"):
        search_faiss_index(flat, {**record, "factory": "Flat"}, queries, 10, nprobe=2)


def test_the_index_record_names_the_backend_that_searches_it(tmp_path, capsys):
    """``search`` asks the backend that an index's record (``<index>.json``, written by ``index``) names, whatever
    the index file is called; a record written before records named it is a FAISS index's; a record naming a
    backend this version does not know, or one that stores no indexes, is one line naming the index and the fix."""
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    settings = {"fingerprint": "a-test-model", "similarity": "dot"}
    documents = save_embedding_shards(tmp_path / "emb", rng.standard_normal((60, 8)).astype(np.float32),
                                      [f"d{i}" for i in range(60)], shard_size=25, settings=settings)
    queries = save_embedding_shards(tmp_path / "queries", rng.standard_normal((4, 8)).astype(np.float32),
                                    [f"q{i}" for i in range(4)], settings={**settings, "side": "query"})
    index = tmp_path / "flat.index"  # no .faiss suffix: the record decides
    assert main(["index", str(documents.folder), "--faiss", "Flat", "--output", str(index)]) == 0
    record_path = tmp_path / "flat.json"
    record = json.loads(record_path.read_text())
    assert record["backend"] == "faiss" and record["factory"] == "Flat"

    def search(corpus, output) -> int:
        return main(["search", str(corpus), str(queries.folder), "--k", "5", "--output", str(output),
                     "--no-progress"])

    # what reading the index reads, also under this name: its record and shards are inputs no --output may overwrite
    assert shard_folder_files(index)[:2] == [index, record_path]
    assert set(shard_folder_files(documents.folder)) <= set(shard_folder_files(index))
    assert search(index, record_path) == 2 and json.loads(record_path.read_text()) == record
    capsys.readouterr()
    assert search(documents.folder, tmp_path / "exact.trec") == 0
    assert search(index, tmp_path / "flat.trec") == 0
    exact, flat = read_trec_run(tmp_path / "exact.trec"), read_trec_run(tmp_path / "flat.trec")
    assert exact.keys() == flat.keys() == {f"q{i}" for i in range(4)}
    for query, ranked in exact.items():
        assert list(ranked) == list(flat[query])
        assert list(ranked.values()) == pytest.approx(list(flat[query].values()), abs=1e-5)
    # a record written before records named their backend: FAISS's, the only stored indexes then
    del record["backend"]
    record_path.write_text(json.dumps(record))
    assert search(index, tmp_path / "unnamed.trec") == 0
    assert read_trec_run(tmp_path / "unnamed.trec") == flat

    capsys.readouterr()
    record_path.write_text(json.dumps({**record, "backend": "annoy"}))
    assert search(index, tmp_path / "unknown.trec") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"dense-encoders search: error: {index}: its record flat.json names the search backend 'annoy', which this "
        "version does not know (it knows exact, faiss): search it with the dense-encoders version that built it, or "
        "build the index again with `dense-encoders index`"), err
    for damaged in (["faiss"], {"name": "faiss"}):  # before: TypeError: unhashable type
        record_path.write_text(json.dumps({**record, "backend": damaged}))
        assert search(index, tmp_path / "unknown.trec") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"its record flat.json names the search backend {damaged!r}, which this" in err[0]
    # the other fields, damaged by hand (before: TypeError from the shards path or the count)
    for field, damaged in (("shards", 5), ("count", "x"), ("similarity", None)):
        record_path.write_text(json.dumps({**record, field: damaged}))
        assert search(index, tmp_path / "unknown.trec") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"flat.json: its field {field!r} is {damaged!r}, not " in err[0], err
    record_path.write_text(json.dumps({**record, "backend": "exact"}))
    assert search(index, tmp_path / "exact-index.trec") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{index}: the exact backend stores no indexes" in err[0], err
    record_path.unlink()
    assert search(index, tmp_path / "no-record.trec") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{index} has no record flat.json beside it" in err[0], err
    assert not any((tmp_path / name).exists() for name in ("unknown.trec", "exact-index.trec", "no-record.trec"))


def test_encode_index_search_and_evaluate_from_the_command_line(model, tmp_path, capsys):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", 120)
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[i + 1]}"})
                                                + "\n" for i in range(8)))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i * 7}\t1\n"
                                                                                      for i in range(8)))
    emb, queries = tmp_path / "emb", tmp_path / "queries"
    assert main(["encode", str(model), str(beir), "--output", str(emb), "--shard-size", "32", "--dtype", "float32",
                 "--no-progress"]) == 0
    assert main(["encode", str(model), str(beir), "--queries", "--output", str(queries), "--dtype", "float32",
                 "--no-progress"]) == 0
    assert main(["search", str(emb), str(queries), "--k", "20", "--output", str(tmp_path / "exact.trec"),
                 "--no-progress"]) == 0
    assert main(["index", str(emb), "--faiss", "Flat"]) == 0
    assert main(["search", str(emb / "index-Flat.faiss"), str(beir), "--k", "20", "--output",
                 str(tmp_path / "flat.trec"), "--no-progress"]) == 0

    exact, flat = read_trec_run(tmp_path / "exact.trec"), read_trec_run(tmp_path / "flat.trec")
    assert exact.keys() == flat.keys() and all(len(documents) == 20 for documents in exact.values())
    for query, documents in exact.items():  # the same scores rank by rank; tied documents may swap
        assert sorted(documents.values()) == pytest.approx(sorted(flat[query].values()), abs=1e-5)
        kth = min(documents.values())
        assert {d for d, score in documents.items() if score > kth + 1e-5} <= set(flat[query])
    encoded = tmp_path / "encoded.json"
    reused = tmp_path / "reused.json"
    assert main(["evaluate", str(model), str(beir), "--output", str(encoded), "--no-progress"]) == 0
    assert main(["evaluate", str(model), str(beir), "--output", str(reused), "--corpus-embeddings", str(emb),
                 "--no-progress"]) == 0
    first, second = json.loads(encoded.read_text()), json.loads(reused.read_text())
    assert second["metrics"] == pytest.approx(first["metrics"], abs=1e-12)
    assert second["timings"]["documents_cached"] is True
    capsys.readouterr()
    assert main(["evaluate", str(model), str(beir), "--corpus-embeddings", str(emb), "--document-max-length", "8",
                 "--no-progress"]) == 2
    assert "was encoded differently (max_length: 32 there, 8 here)" in capsys.readouterr().err
    other = tmp_path / "other-corpus"
    assert main(["encode", str(model), str(write_corpus(tmp_path / "c.jsonl", 40)), "--output", str(other),
                 "--no-progress"]) == 0
    assert main(["evaluate", str(model), str(beir), "--corpus-embeddings", str(other), "--no-progress"]) == 2
    assert "missing): encode this corpus" in capsys.readouterr().err
    # the faiss backend searches no shards: one line naming what does
    assert main(["evaluate", str(model), str(beir), "--corpus-embeddings", str(emb), "--backend", "faiss",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "dense-encoders evaluate: error: corpus embeddings are searched exactly, shard by shard; for a FAISS index "
        "use `dense-encoders index` and `dense-encoders search`")


def test_encode_and_evaluate_read_the_same_id_contents_corpus(model, tmp_path):
    """A corpus of ``id`` / ``contents`` lines (Pyserini's layout) is read alike by ``encode`` and by ``evaluate``:
    encode + search writes the run evaluate writes (same documents, same scores), and ir_measures scores that
    run as evaluate reports it."""
    import ir_measures

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    texts = sorted({" ".join(WORDS[(i * step) % len(WORDS)] for step in (1, 5, 7)) + f" {WORDS[i % 3]}"
                    for i in range(40)})
    with open(beir / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            record = {"id": f"p{i}", "contents": text} if i % 2 else {"id": i, "title": "a title", "contents": text}
            handle.write(json.dumps(record) + "\n")
    (beir / "queries.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "text": f"{WORDS[i]} {WORDS[i + 2]}"})
                                                + "\n" for i in range(6)))
    doc_id = [str(i) if i % 2 == 0 else f"p{i}" for i in range(len(texts))]
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\t{doc_id[(i * 5) % len(texts)]}\t1\nq{i}\t{doc_id[(i * 3 + 1) % len(texts)]}\t2\n" for i in range(6)))
    k = len(texts)
    emb, queries = tmp_path / "emb", tmp_path / "queries"
    assert main(["encode", str(model), str(beir), "--output", str(emb), "--dtype", "float32", "--no-progress"]) == 0
    assert main(["encode", str(model), str(beir), "--queries", "--output", str(queries), "--dtype", "float32",
                 "--no-progress"]) == 0
    assert main(["search", str(emb), str(queries), "--k", str(k), "--output", str(tmp_path / "search.trec"),
                 "--no-progress"]) == 0
    assert main(["evaluate", str(model), str(beir), "--k", str(k), "--output", str(tmp_path / "results.json"),
                 "--run-output", str(tmp_path / "evaluate.trec"), "--no-progress"]) == 0

    searched, evaluated = read_trec_run(tmp_path / "search.trec"), read_trec_run(tmp_path / "evaluate.trec")
    assert searched.keys() == evaluated.keys() == {f"q{i}" for i in range(6)}
    for query, documents in searched.items():
        assert documents.keys() == evaluated[query].keys() == set(doc_id)
        for document, score in documents.items():
            assert score == pytest.approx(evaluated[query][document], abs=1e-5)
    qrels = [ir_measures.Qrel(q, d, int(g)) for q, d, g in
             (line.split("\t") for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:])]
    run = [ir_measures.ScoredDoc(q, d, s) for q, documents in searched.items() for d, s in documents.items()]
    reference = ir_measures.calc_aggregate([ir_measures.nDCG @ 10, ir_measures.RR @ 10, ir_measures.R @ 100],
                                           qrels, run)
    reported = json.loads((tmp_path / "results.json").read_text())["metrics"]
    assert reported["ndcg@10"] == pytest.approx(reference[ir_measures.nDCG @ 10], abs=1e-4)
    assert reported["mrr@10"] == pytest.approx(reference[ir_measures.RR @ 10], abs=1e-4)
    assert reported["recall@100"] == pytest.approx(reference[ir_measures.R @ 100], abs=1e-4)


# ---- memory --------------------------------------------------------------------------------------------


PEAK_RSS = """
import sys
import sentence_transformers, torch, transformers  # noqa: F401 - imported before the peak is reset
from dense_encoders.cli import main

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))

before = kib("VmRSS:")
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # the peak (VmHWM) starts again from the current RSS: it measures the command
code = main(sys.argv[1:])
print("PEAK", kib("VmHWM:"), before, code)
"""


def peak_rss_kib(argv: list[str], cwd: Path) -> tuple[int, int]:
    """(peak RSS of the command, its growth over the RSS before it) in KiB, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *argv], cwd=cwd, capture_output=True, text=True,
                          env=cpu_only_env(PYTHONPATH=str(Path(REPO_ROOT) / "src")), timeout=600)
    line = next((line for line in done.stdout.splitlines() if line.startswith("PEAK")), None)
    assert line is not None, done.stderr[-2000:]
    _, peak, before, code = line.split()
    assert code == "0", done.stderr[-2000:]
    return int(peak), int(peak) - int(before)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_memory_does_not_grow_with_the_corpus(model, tmp_path):
    """Peak RSS of encode and of exact search on 20k and on 100k texts (22 MB of text): within +15 %, and the
    commands' own growth within +15 % + 8 MiB (one shard of texts and embeddings, the queries and the top-k
    lists are all that is held; reading the 100k texts at once would add some 40 MB)."""
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"{WORDS[i % 12]} {WORDS[(i * 5) % 12]}\n" for i in range(200)))
    peaks = {}
    for count in (20_000, 100_000):
        texts = tmp_path / f"texts-{count}.txt"
        rng = random.Random(count)
        texts.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(30)) + "\n" for _ in range(count)))
        emb = tmp_path / f"emb-{count}"
        peaks[count] = {
            "encode": peak_rss_kib(["encode", str(model), str(texts), "--output", str(emb), "--shard-size", "5000",
                                    "--batch-size", "512", "--max-length", "8", "--no-progress"], tmp_path),
            "search": peak_rss_kib(["search", str(emb), str(queries), "--output", str(tmp_path / f"{count}.trec"),
                                    "--k", "100", "--no-progress"], tmp_path),
        }
    print("(peak RSS, growth) in KiB:", peaks)
    for step in ("encode", "search"):
        (small_peak, small_growth), (large_peak, large_growth) = peaks[20_000][step], peaks[100_000][step]
        assert large_peak <= 1.15 * small_peak, peaks
        assert large_growth <= 1.15 * small_growth + 8 * 1024, peaks


def test_a_blank_text_is_one_line_naming_the_file_and_line(model, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("alpha beta\n\ngamma\n")
    assert main(["encode", str(model), str(texts), "--output", str(tmp_path / "emb"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "texts.txt:2: blank document '2'" in err and "--allow-empty-documents" in err and err.count("\n") <= 2
    assert not (tmp_path / "emb").exists()  # nothing is written before the texts are read through
    assert main(["encode", str(model), str(texts), "--output", str(tmp_path / "emb"), "--no-progress",
                 "--allow-empty-documents"]) == 0
    assert list(EmbeddingShards.open(tmp_path / "emb").ids()) == ["1", "2", "3"]


# ---- integrity: a finished folder heals and proves itself, ids cannot corrupt a run ---------------------


def encode_argv(model: Path, texts: Path, output: Path, *extra: str) -> list[str]:
    return ["encode", str(model), str(texts), "--output", str(output), "--shard-size", "40", "--no-progress", *extra]


def advised_command(err: str) -> list[str]:
    """The `dense-encoders ...` command a message names between backticks, as argv for ``main``."""
    import re
    import shlex

    command = shlex.split(re.search(r"`(dense-encoders [^`]+)`", err).group(1))
    return command[1:]


@pytest.fixture(scope="module")
def clean(model, corpus, tmp_path_factory) -> dict:
    """An uninterrupted encode of the corpus and of five queries, and the exact search's run: the reference
    every repaired folder and every run is compared with, byte for byte."""
    root = tmp_path_factory.mktemp("clean")
    queries = root / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[i + 3]}"}) + "\n"
                               for i in range(5)))
    assert main(encode_argv(model, corpus, root / "emb")) == 0
    assert main(encode_argv(model, queries, root / "queries", "--queries")) == 0
    assert main(["search", str(root / "emb"), str(root / "queries"), "--k", "10", "--output", str(root / "run.trec"),
                 "--no-progress"]) == 0
    return {"emb": stored(root / "emb"), "run": (root / "run.trec").read_bytes(), "queries": root / "queries",
            "folder": root / "emb"}


def copy_of_clean(clean: dict, folder: Path) -> Path:
    import shutil

    return Path(shutil.copytree(clean["folder"], folder))


def search_argv(emb: Path, clean: dict, output: Path) -> list[str]:
    return ["search", str(emb), str(clean["queries"]), "--k", "10", "--output", str(output), "--no-progress"]


def test_encode_rebuilds_a_truncated_shard_of_a_finished_folder(model, corpus, clean, tmp_path, caplog):
    """Case 1: re-running encode on a finished folder verifies every shard and rebuilds the broken one."""
    emb = copy_of_clean(clean, tmp_path / "emb")
    recorded = json.loads(clean["emb"]["manifest.json"])["shards"][3]["bytes"]
    with open(emb / "shard-00003.safetensors", "r+b") as handle:
        handle.truncate(1000)
    with caplog.at_level("WARNING", logger="dense_encoders"):
        assert main(encode_argv(model, corpus, emb)) == 0
    assert f"shard-00003.safetensors is 1000 bytes, the manifest records {recorded}: encoding it again" in caplog.text
    assert f"rebuilt shard-00003.safetensors in {emb}" in caplog.text
    assert stored(emb) == clean["emb"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dense_encoders"):
        assert main(encode_argv(model, corpus, emb)) == 0  # intact: verified, nothing rebuilt, nothing changed
    assert "rebuilt" not in caplog.text and stored(emb) == clean["emb"]


@pytest.mark.parametrize("damage", ["delete", "truncate", "flip"])
def test_following_the_advice_of_search_repairs_the_folder(clean, tmp_path, capsys, damage):
    """Cases 2 and 3: a missing, cut or changed shard stops search (nothing written) with the command that
    rebuilds it; running that command gives the clean folder, and search then the clean run."""
    emb = copy_of_clean(clean, tmp_path / "emb")
    shard = emb / "shard-00002.safetensors"
    if damage == "delete":
        shard.unlink()
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-8])
    else:  # one bit of one embedding, changed in place: same size, readable, other scores
        with open(shard, "r+b") as handle:
            handle.seek(shard.stat().st_size - 100)
            byte = handle.read(1)
            handle.seek(-1, 1)
            handle.write(bytes([byte[0] ^ 0x01]))
    recorded = json.loads(clean["emb"]["manifest.json"])["shards"][2]["bytes"]
    problem = {"delete": "is missing", "truncate": f"is {recorded - 8} bytes, the manifest records {recorded}",
               "flip": "differs from the sha256 the manifest records"}[damage]
    run = tmp_path / "run.trec"
    capsys.readouterr()
    assert main(search_argv(emb, clean, run)) == 2
    err = capsys.readouterr().err
    assert f"{shard} {problem}: rebuild it with `dense-encoders encode " in err and err.count("\n") == 1, err
    assert not run.exists()
    assert main(advised_command(err)) == 0
    assert stored(emb) == clean["emb"]
    assert main(search_argv(emb, clean, run)) == 0
    assert run.read_bytes() == clean["run"]


def test_index_and_evaluate_verify_the_checksums(model, tmp_path, capsys):
    """Case 3: a flipped byte stops index and evaluate --corpus-embeddings as it stops search."""
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", 60)
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "river bridge"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    emb = tmp_path / "emb"
    assert main(["encode", str(model), str(beir), "--output", str(emb), "--shard-size", "25", "--no-progress"]) == 0
    shard = emb / "shard-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x40
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["index", str(emb), "--faiss", "Flat"]) == 2
    assert f"{shard} differs from the sha256 the manifest records" in capsys.readouterr().err
    assert not (emb / "index-Flat.faiss").exists()
    assert main(["evaluate", str(model), str(beir), "--corpus-embeddings", str(emb), "--no-progress"]) == 2
    assert f"{shard} differs from the sha256 the manifest records" in capsys.readouterr().err


def test_duplicate_ids_are_refused_naming_both_lines(model, tmp_path, capsys):
    """Case 4: line 7 repeats the first id with another text: refused before anything is written."""
    texts = tmp_path / "corpus.jsonl"
    records = [{"_id": f"d{i}", "text": f"{WORDS[i]} passage"} for i in range(6)] + [{"_id": "d0", "text": "other"}]
    texts.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert main(encode_argv(model, texts, tmp_path / "emb")) == 2
    err = capsys.readouterr().err
    assert f"{texts}:7: duplicate document id 'd0' (first at {texts}:1)" in err and err.count("\n") == 1, err
    assert not (tmp_path / "emb").exists()
    tsv = tmp_path / "collection.tsv"
    tsv.write_text("1\ta\n2\tb\n\n1\tc\n")
    with pytest.raises(DataFormatError, match=r"collection.tsv:4: duplicate document id '1' \(first at .*:1\)"):
        list(iterate_texts(text_source(tsv)))


def test_ids_with_whitespace_are_refused(model, tmp_path, capsys):
    """Case 5: a tab (or any whitespace) inside an id would add a column to the TREC run."""
    texts = tmp_path / "corpus.jsonl"
    texts.write_text(json.dumps({"_id": "d1", "text": "one"}) + "\n"
                     + json.dumps({"_id": "a\tb", "text": "two"}) + "\n")
    assert main(encode_argv(model, texts, tmp_path / "emb")) == 2
    err = capsys.readouterr().err
    assert f"{texts}:2: document id 'a\\tb' contains whitespace ('\\t')" in err and err.count("\n") == 1, err
    tsv = tmp_path / "queries.tsv"
    tsv.write_text("q1\tfirst\nq 2\tsecond\n")
    with pytest.raises(DataFormatError, match=r"queries.tsv:2: query id 'q 2' contains whitespace"):
        list(iterate_texts(text_source(tsv, "query")))
    from dense_encoders.data.runs import write_trec_run

    with pytest.raises(ValueError, match=r"'a\\tb' is empty or contains whitespace"):
        write_trec_run({"q1": {"a\tb": 1.0}}, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()


def test_a_byte_order_mark_is_not_part_of_the_first_id(model, tmp_path):
    """Case 6: a UTF-8 BOM (Windows editors write one) is skipped by every reader; the shards equal those of
    the same file without it."""
    plain, marked = tmp_path / "plain.tsv", tmp_path / "marked.tsv"
    plain.write_text("4380635\tfahrenheit scale\n7\tsecond passage\n", encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert [i for i, _ in iterate_texts(text_source(marked))] == ["4380635", "7"]
    assert main(encode_argv(model, plain, tmp_path / "a")) == 0
    assert main(encode_argv(model, marked, tmp_path / "b")) == 0
    a, b = stored(tmp_path / "a"), stored(tmp_path / "b")
    assert ({k: v for k, v in a.items() if k.startswith("shard-")}
            == {k: v for k, v in b.items() if k.startswith("shard-")})
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps({"_id": "4380635", "text": "x"}).encode() + b"\n")
    from dense_encoders.data.retrieval import read_beir_qrels, read_corpus_jsonl

    assert list(read_corpus_jsonl(jsonl)) == [i for i, _ in iterate_texts(text_source(jsonl))] == ["4380635"]
    qrels = tmp_path / "test.tsv"
    qrels.write_bytes(b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\nq1\t4380635\t1\n")
    assert read_beir_qrels(qrels) == {"q1": {"4380635": 1}}


CORPUS_CASES = {
    "valid": [{"_id": "d1", "title": "A", "text": "one"}, {"id": 7, "text": "two"}, {"docid": "x", "contents": "3"}],
    "duplicate": [{"_id": "d1", "text": "one"}, {"_id": "d2", "text": "two"}, {"_id": "d1", "text": "three"}],
    "tab": [{"_id": "d1", "text": "one"}, {"_id": "d\t2", "text": "two"}],
    "space": [{"_id": " d1", "text": "one"}],
    "empty id": [{"_id": "", "text": "one"}],
    "no id": [{"text": "one"}],
    "no text": [{"_id": "d1", "title": "only a title"}],
    "id not a string": [{"_id": ["d1"], "text": "one"}],
}


@pytest.mark.parametrize("case", sorted(CORPUS_CASES))
def test_the_evaluation_and_the_encoding_readers_agree(tmp_path, case):
    """``read_corpus_jsonl`` (evaluate) and ``iterate_texts`` (encode) accept the same corpora with the same ids
    and texts, and refuse the others with the same message."""
    from dense_encoders.data.format import document_text
    from dense_encoders.data.retrieval import read_corpus_jsonl

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in CORPUS_CASES[case]))
    outcomes = []
    for read in (lambda: [(i, document_text(d)) for i, d in read_corpus_jsonl(path).items()],
                 lambda: list(iterate_texts(text_source(path)))):
        try:
            outcomes.append(read())
        except DataFormatError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]
    assert isinstance(outcomes[0], list) == (case == "valid"), outcomes[0]


def test_text_that_is_not_utf8_names_the_file_and_line(model, tmp_path, capsys):
    texts = tmp_path / "corpus.jsonl"
    texts.write_bytes(b'{"_id": "d1", "text": "one"}\n{"_id": "d2", "text": "two"}\n{"_id": "d3", "text": "caf\xe9"}\n')
    assert main(encode_argv(model, texts, tmp_path / "emb")) == 2
    err = capsys.readouterr().err
    assert f"{texts}:3: not UTF-8 (byte 0xe9 at byte 27 of the line): save the file as UTF-8" in err, err
    config = tmp_path / "run.yaml"
    config.write_bytes(b"k: 10\nno_progress: true\ntag: \xff\n")
    assert main(["search", "a", "b", "--output", "c", "--config", str(config)]) == 2
    assert f"{config}:3: not UTF-8 (byte 0xff)" in capsys.readouterr().err


def test_ctrl_c_during_encode_prints_the_command_that_continues(model, corpus, clean, tmp_path, capsys, monkeypatch):
    """The command printed after Ctrl-C, run as printed, finishes the folder as an uninterrupted run would."""
    from dense_encoders.evaluation import corpus_encoding

    original, written = corpus_encoding.write_shard, []

    def write_then_interrupt(*args, **kwargs):
        original(*args, **kwargs)
        written.append(args[1])
        if len(written) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(corpus_encoding, "write_shard", write_then_interrupt)
    emb = tmp_path / "emb"
    capsys.readouterr()
    assert main(encode_argv(model, corpus, emb)) == 130
    err = capsys.readouterr().err
    assert "dense-encoders encode: interrupted; finished shards are kept: continue with `dense-encoders encode" in err
    monkeypatch.setattr(corpus_encoding, "write_shard", original)
    assert main(advised_command(err)) == 0
    assert stored(emb) == clean["emb"]


def test_search_says_how_many_documents_it_wrote(clean, tmp_path, capsys):
    run = tmp_path / "run.trec"
    capsys.readouterr()
    assert main(["search", str(clean["folder"]), str(clean["queries"]), "--k", "500", "--output", str(run),
                 "--no-progress"]) == 0
    assert capsys.readouterr().err == (f"Wrote the top 230 documents of 5 queries over 230 documents to {run} "
                                       "(--k 500: the corpus holds 230)\n")
    assert {len(documents) for documents in read_trec_run(run).values()} == {230}


def test_the_loading_weights_bar_shows_only_with_debug(model, clean, tmp_path, capsys):
    argv = ["search", str(clean["folder"]), str(clean["queries"]).replace("queries", "queries.jsonl"), "--k", "3",
            "--no-progress", "--output"]
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "a.trec")]) == 0
    assert "Loading weights" not in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "b.trec"), "--debug"]) == 0
    assert "Loading weights" in capsys.readouterr().err


SLOW_FORWARD_ENCODE = """
import atexit, sys, time
from dense_encoders import cli
atexit.register(time.sleep, 0.5)  # the interpreter's exit takes a while (as torch's and the tokenizers' cleanups can)
from dense_encoders.evaluation import batch_pipeline
forward = batch_pipeline._forward
def slow_forward(*args, **kwargs):
    time.sleep(0.2)  # a model slower than its tokenizer: the tokenizer thread runs ahead and fills its queue
    return forward(*args, **kwargs)
batch_pipeline._forward = slow_forward
sys.argv = ["dense-encoders", *sys.argv[1:]]
sys.exit(cli.main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["shard", "manifest"])
def test_ctrl_c_ends_encode_at_once_and_leaves_it_resumable(model, corpus, tmp_path, moment):
    """A real SIGINT, through the console entry point, 0.1 s after the first shard is written (with a forward slower
    than the tokenizer, the tokenizer thread has then tokenized the second shard and waits for room to say so) or 0.1 s
    after the manifest is written (the run is complete and the interpreter exits). Before: the first hung for good
    (the thread's last put had no timeout, and the interrupted command waited for it); the second printed "Exception
    ignored in atexit callback ... KeyboardInterrupt" and a traceback. Now the command ends within seconds with the
    one "interrupted" line, or nothing, and the same command finishes the run."""
    import signal
    import time

    output = tmp_path / "emb"
    argv = ["encode", str(model), str(corpus), "--output", str(output), "--batch-size", "1", "--no-progress",
            "--shard-size", "5" if moment == "shard" else "1000"]
    process = subprocess.Popen([sys.executable, "-c", SLOW_FORWARD_ENCODE if moment == "shard" else
                                SLOW_FORWARD_ENCODE.replace("time.sleep(0.2)", "pass"), *argv], cwd=tmp_path,
                               text=True, env=cpu_only_env(PYTHONPATH=str(Path(REPO_ROOT) / "src")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    awaited = output / ("shard-00000.safetensors" if moment == "shard" else "manifest.json")
    try:
        deadline = time.monotonic() + 120
        while not awaited.exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
            time.sleep(0.002)
        time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode in (0, 130), err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert process.returncode == (130 if moment == "shard" else 0)
    if process.returncode == 130:
        assert err.strip().splitlines() == [
            "dense-encoders encode: interrupted; finished shards are kept: continue with "
            f"`dense-encoders {' '.join(argv)}`"]
    assert main(argv) == 0
    assert EmbeddingShards.open(output).count == 230


@pytest.mark.slow
def test_two_encode_runs_into_one_folder_are_one_run_and_a_refusal(model, corpus, tok, tmp_path):
    """Two real processes started together into one --output (before: both found the folder new, both exited 0
    printing success, and the shards were a mix or the last one's). The first holds the folder's lock for its whole
    run; the second is refused in one line naming it, and the folder holds the first one's run."""
    import time

    other = tiny_model(tmp_path / "other", tok, seed=1)
    output = tmp_path / "emb"
    env = cpu_only_env(PYTHONPATH=str(Path(REPO_ROOT) / "src"))
    argv = ["--output", str(output), "--batch-size", "1", "--shard-size", "5", "--no-progress"]
    first = subprocess.Popen([sys.executable, "-c", SLOW_FORWARD_ENCODE, "encode", str(model), str(corpus), *argv],
                             cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / ".emb.lock").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.01)
        second = subprocess.run([sys.executable, "-m", "dense_encoders.cli", "encode", str(other), str(corpus),
                                 *argv], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)
        assert first.poll() is None  # the refusal came while the first run was still encoding
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, second.stderr
    assert f"dense-encoders encode: error: {output} is in use by another run (PID {first.pid} on " in second.stderr
    assert "wait for it to end, or choose another --output." in second.stderr
    assert main(["encode", str(model), str(corpus), *argv]) == 0  # the first run, continued, ends as its own
    assert EmbeddingShards.open(output).settings["model"] == str(model.resolve())


def test_a_full_disk_during_encode_is_one_line_and_the_run_goes_on(model, corpus, tmp_path, capsys, monkeypatch):
    """The disk fills while shard 1 is written (safetensors' own error, as a full disk gives it; before: a
    SafetensorError traceback): one line naming the folder and the room needed, shard 0 kept, and the same command
    finishes the run once there is room."""
    from safetensors import SafetensorError

    from dense_encoders.data import embedding_shards

    save_file, calls = embedding_shards.save_file, []

    def full_disk(tensors, path, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
                                  'space left on device" })')
        return save_file(tensors, path, metadata=metadata)

    monkeypatch.setattr(embedding_shards, "save_file", full_disk)
    output = tmp_path / "emb"
    argv = ["encode", str(model), str(corpus), "--output", str(output), "--shard-size", "100", "--dtype", "float32",
            "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"dense-encoders encode: error: the disk of {output} is full (" in err
    assert " KB more): free space on it, or move the folder elsewhere, and run the same command again" in err
    assert sorted(p.name for p in output.glob("shard-*.safetensors")) == ["shard-00000.safetensors"]
    assert not list(output.glob(".shard-*"))  # no scratch file of the failed write
    monkeypatch.setattr(embedding_shards, "save_file", save_file)
    assert main(argv) == 0
    assert EmbeddingShards.open(output).count == 230
