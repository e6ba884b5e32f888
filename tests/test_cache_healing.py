"""Faults on disk are neither fatal nor silent: a damaged embedding-cache entry is logged with its
path, discarded and recomputed; a truncated weights file is named with its size on disk and the size its
header promises."""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from transformers import BertConfig, BertModel

from dense_encoders.checkpoints.weights import CheckpointWeightsError
from dense_encoders.cli import main
from dense_encoders.evaluation import RetrievalEncoder, evaluate_retrieval

DOCUMENTS = [
    "dense retrieval encodes queries and documents into vectors",
    "a teacher cross-encoder scores query document pairs",
    "pooling the hidden states gives one vector per text",
    "the embedding cache stores vectors on disk",
    "a truncated file is what an interrupted copy leaves",
]
QUERIES = {"q0": "what is dense retrieval", "q1": "who scores the pairs", "q2": "where are vectors stored"}
QRELS = {"q0": {"d0": 1}, "q1": {"d1": 1}, "q2": {"d3": 2}}
LOGGER = "dense_encoders.evaluation.encoding"


@pytest.fixture
def tiny_bert(tmp_path, tok) -> Path:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path / "tiny-bert"
    BertModel(config).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def beir_folder(tmp_path) -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i, text in enumerate(DOCUMENTS)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q, "text": text}) + "\n" for q, text in QUERIES.items()))
    rows = [f"{q}\t{d}\t{s}" for q, docs in QRELS.items() for d, s in docs.items()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return folder


def evaluate(model: Path, data: Path, cache: Path) -> dict:
    return evaluate_retrieval(str(model), data, k=5, pooling="cls", cache_dir=cache, no_progress=True)


def cache_entry(cache: Path, side: str) -> Path:
    (entry,) = cache.glob(f"{side}-*.safetensors")
    return entry


def test_a_truncated_cache_entry_is_discarded_and_recomputed(tiny_bert, beir_folder, tmp_path, caplog):
    cache = tmp_path / "cache"
    clean = evaluate(tiny_bert, beir_folder, cache)
    entry = cache_entry(cache, "document")
    entry.write_bytes(entry.read_bytes()[:20])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        healed = evaluate(tiny_bert, beir_folder, cache)
    assert healed.metrics == clean.metrics and healed.per_query == clean.per_query
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "cannot be read" in warnings[0]
    # the entry was rewritten whole (atomically) and is used as it is by the next run, without a warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        again = evaluate(tiny_bert, beir_folder, cache)
    assert again.metrics == clean.metrics and not caplog.records
    assert sorted(p.name for p in cache.iterdir() if p.suffix != ".safetensors") == []  # no scratch files left


def test_cache_entries_of_the_wrong_shape_or_model_are_recomputed(tiny_bert, tmp_path, caplog):
    cache = tmp_path / "cache"
    encoder = RetrievalEncoder(str(tiny_bert), pooling="cls", cache_dir=cache, show_progress_bar=False)
    clean = encoder.encode_documents(DOCUMENTS)
    entry = Path(clean.cache_path)
    count, dimension = clean.embeddings.shape
    metadata = {"side": "document", "count": str(count), "model": "x", "fingerprint": encoder.fingerprint}
    damaged = {
        "expected 5 rows": ({"embeddings": np.ones((count - 1, dimension), np.float32)}, metadata),
        "has dimension 7": ({"embeddings": np.ones((count, 7), np.float32)}, metadata),
        "fingerprint mismatch": ({"embeddings": np.ones((count, dimension), np.float32)},
                                 {**metadata, "fingerprint": "0" * 64}),
        "no 'embeddings' tensor": ({"vectors": np.ones((count, dimension), np.float32)}, metadata),
    }
    for reason, (tensors, recorded) in damaged.items():
        save_file(tensors, str(entry), metadata=recorded)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            healed = encoder.encode_documents(DOCUMENTS)
        assert not healed.cached and np.array_equal(healed.embeddings, clean.embeddings), reason
        assert str(entry) in caplog.text and reason in caplog.text, (reason, caplog.text)
        assert encoder.encode_documents(DOCUMENTS).cached  # rewritten, and read back
    # an entry replaced by another process between reading and deleting is left alone
    before = entry.stat()
    save_file({"embeddings": clean.embeddings[:1].copy()}, str(entry) + ".new")
    os.replace(str(entry) + ".new", entry)
    encoder._discard_cache_entry(entry, before, "cannot be read (test)")
    assert entry.is_file()
    entry.unlink()
    encoder._discard_cache_entry(entry, before, "cannot be read (test)")  # gone already: nothing to do


def safetensors_header_length(path: Path) -> tuple[int, int]:
    """(header length N, largest data_offsets end) of an intact safetensors file."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    return length, max(entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__")


def test_a_truncated_weights_file_states_its_size_and_the_promised_size(condenser_folder, tmp_path, capsys):
    path = condenser_folder / "model.safetensors"
    data = path.read_bytes()
    header_length, data_end = safetensors_header_length(path)
    promised = 8 + header_length + data_end
    assert promised == len(data)
    kept = len(data) // 2
    path.write_bytes(data[:kept])
    with pytest.raises(CheckpointWeightsError) as refused:
        RetrievalEncoder(condenser_folder, show_progress_bar=False)
    message = str(refused.value)
    assert str(path) in message and "\n" not in message
    assert f"{kept} bytes on disk, the header promises {promised}" in message

    # cut inside the header itself: the size the header length announces
    path.write_bytes(data[:20])
    with pytest.raises(CheckpointWeightsError) as refused:
        RetrievalEncoder(condenser_folder, show_progress_bar=False)
    message = str(refused.value)
    assert str(path) in message and f"20 bytes on disk, the header alone promises {8 + header_length}" in message

    # through the CLI, as a user runs it
    path.write_bytes(data[:kept])
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d0", "title": "", "text": "a document"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "a query"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    assert main(["evaluate", str(condenser_folder), str(beir), "--k", "1", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert str(path) in error and f"{kept} bytes on disk, the header promises {promised}" in error
    assert "Traceback" not in error
