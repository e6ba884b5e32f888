"""The encoding pipeline (evaluation/batch_pipeline.py): sentence-transformers' own vectors, batch by batch, with
the tokenizer working ahead in a thread; its errors reach the caller; a pooling TITE takes the mask on the host."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from dense_encoders import TiteModel
from dense_encoders.evaluation.batch_pipeline import encode_batches, takes_host_attention_mask
from dense_encoders.models.tite.presets import tite_preset

TEXTS = [
    "what is dense retrieval",
    "a passage about rivers, mountains and the enzymes of a protein that folds in water",
    "music",
    "how does a search index work when the data set is big and the queries are short",
    "red green blue",
    "first last long short text word model vector",
    "the encoder reads the document once and writes one vector for it",
]


@pytest.fixture(scope="module")
def tite_folder(tmp_path_factory, tok):
    folder = tmp_path_factory.mktemp("tite")
    torch.manual_seed(0)
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _batches(texts, size):
    return [texts[start : start + size] for start in range(0, len(texts), size)]


def _sentence_transformers_vectors(model, batches, **options):
    """Reference: sentence-transformers' encode, one call per batch."""
    return [model.encode(batch, convert_to_numpy=True, **options) for batch in batches]


@pytest.mark.parametrize("task", ["query", "document"])
def test_minilm_vectors_equal_sentence_transformers_encode(minilm_path, task):
    model = SentenceTransformer(str(minilm_path), device="cpu")
    batches = _batches(TEXTS, 3)
    ours = list(encode_batches(model, batches, prompt="search: ", task=task, normalize=True))
    theirs = _sentence_transformers_vectors(model, batches, prompt="search: ", task=task, normalize_embeddings=True)
    assert [vectors.shape for vectors in ours] == [vectors.shape for vectors in theirs]
    for mine, reference in zip(ours, theirs):
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, reference, rtol=0, atol=1e-6)  # the same computation, batch for batch


def test_truncate_dim_and_a_plain_prompt_follow_sentence_transformers(minilm_path):
    model = SentenceTransformer(str(minilm_path), device="cpu", truncate_dim=16)
    batches = _batches(TEXTS, 4)
    ours = list(encode_batches(model, batches, prompt=None))
    theirs = _sentence_transformers_vectors(model, batches)
    assert ours[0].shape == (4, 16)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=0, atol=1e-6)


def test_a_tite_folder_gives_its_pooler_output(tite_folder, tok):
    model = SentenceTransformer(str(tite_folder), device="cpu")
    model.max_seq_length = 16  # the tiny schedule's reach
    assert takes_host_attention_mask(model)
    batches = _batches(TEXTS, 2)
    ours = list(encode_batches(model, batches))
    encoder = TiteModel.from_pretrained(tite_folder).eval()
    for batch, mine in zip(batches, ours):
        inputs = tok(batch, padding=True, truncation=True, max_length=16, return_tensors="pt")
        with torch.no_grad():
            expected = encoder(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).pooler_output
        np.testing.assert_allclose(mine, expected.numpy(), rtol=0, atol=1e-6)


def test_only_a_pooling_tite_takes_the_mask_on_the_host(tok):
    pooling = TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok)))
    assert pooling.host_attention_mask  # one vector per text: nothing downstream reads the mask
    flat = TiteModel(tite_preset("tiny-tite-no-pooling", vocab_size=len(tok)))
    assert not flat.host_attention_mask  # token states go on to sentence-transformers' pooling, which masks them


def test_a_tokenizer_error_reaches_the_caller_and_the_worker_ends(minilm_path):
    model = SentenceTransformer(str(minilm_path), device="cpu")

    def batches():
        yield TEXTS[:2]
        raise OSError("the corpus file went away")

    with pytest.raises(OSError, match="went away"):
        list(encode_batches(model, batches()))
    assert not [thread for thread in threading.enumerate() if thread.name == "dense-encoders-tokenizer"]


def test_a_consumer_that_stops_early_ends_the_worker(minilm_path):
    model = SentenceTransformer(str(minilm_path), device="cpu")
    stream = encode_batches(model, _batches(TEXTS * 20, 2))
    first = next(stream)
    assert first.shape[0] == 2
    stream.close()
    assert not [thread for thread in threading.enumerate() if thread.name == "dense-encoders-tokenizer"]


def test_an_interrupted_consumer_ends_even_when_the_worker_has_tokenized_everything(tite_folder):
    """Ctrl-C while the worker, done with every batch, waits for room in the full queue to say so: the consumer's
    close (what an interrupt runs) ends within a second (before: the worker's last put had no timeout, and the
    consumer's join waited for it for good)."""
    from dense_encoders.evaluation.batch_pipeline import TOKENIZED_AHEAD

    model = SentenceTransformer(str(tite_folder), device="cpu", trust_remote_code=True)
    stream = encode_batches(model, _batches(TEXTS[:1] * (TOKENIZED_AHEAD + 1), 1))
    next(stream)  # the worker then fills the queue with the other batches and waits to put its end marker
    deadline = time.monotonic() + 10
    while not _waiting_to_put_the_end(deadline):
        time.sleep(0.01)
    closing = threading.Thread(target=stream.close)
    closing.start()
    closing.join(timeout=1)
    assert not closing.is_alive()
    assert not [thread for thread in threading.enumerate() if thread.name == "dense-encoders-tokenizer"]


def _waiting_to_put_the_end(deadline: float) -> bool:
    """Whether the tokenizer thread is inside the queue's ``put`` of its end marker (read from its stack)."""
    assert time.monotonic() < deadline, "the tokenizer thread never reached its end marker"
    worker = next(thread for thread in threading.enumerate() if thread.name == "dense-encoders-tokenizer")
    frame = sys._current_frames().get(worker.ident)
    while frame is not None:
        if frame.f_code.co_name == "put" and type(frame.f_locals.get("item")).__name__ == "_Stop":
            return True
        frame = frame.f_back
    return False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_vectors_are_sentence_transformers_and_no_batch_waits_for_the_device(tite_folder):
    model = SentenceTransformer(str(tite_folder), device="cuda")
    model.to(torch.bfloat16)
    model.max_seq_length = 16
    batches = _batches(TEXTS * 6, 4)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a .cpu(), .item() or a mask read in the forward raises
    try:
        ours = list(encode_batches(model, batches))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    theirs = _sentence_transformers_vectors(model, batches)
    for mine, reference in zip(ours, theirs):
        assert mine.dtype == np.float32
        # the same batch through the same kernels; the plan read from the host mask equals the one from the device's
        np.testing.assert_allclose(mine, reference, rtol=0, atol=2**-8 * float(np.abs(reference).max()))
