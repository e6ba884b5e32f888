"""``dense-encoders bench --end-to-end``: encoding real texts as users do, beside the bare forward.

A user encodes a corpus through ``dense-encoders encode`` or ``SentenceTransformer.encode``, not through the bare
forward: the texts are tokenized on the CPU, copied to the device, and the vectors copied back. Once the forward is
fast, those steps can cost more than the forward itself. :func:`end_to_end_report` measures, for BERT-base (the
baseline; [CLS] vector) and each TITE preset, with random weights saved as a model folder with the bundled
bert-base-uncased tokenizer, on the same texts (a corpus repeated up to ``num_texts``):

    tokenize ms/batch   ``model.preprocess`` of one batch on one thread (the texts sorted by tokens, as encoded)
    forward             texts/s of the forward alone (``model(features)``, sentence-transformers' pipeline) on
                        batches tokenized and moved to the device beforehand: the bare forward's rate
    encode              texts/s of :func:`~dense_encoders.evaluation.corpus_encoding.encode_corpus` (what
                        ``dense-encoders encode`` runs, after the model is loaded): the source scanned and
                        checksummed, its texts counted in tokens and sorted, encoded through
                        :func:`~dense_encoders.evaluation.batch_pipeline.encode_batches` and written as a shard
    st.encode           texts/s of ``SentenceTransformer.encode_document(texts, batch_size=...)``
    encode / forward    the share of the bare forward's rate that ``encode`` keeps

Every rate is one timed pass after an untimed warm-up on the first batches; the ratios are against BERT's rate in
the same column. The vectors of ``encode`` are checked against ``st.encode``'s (they must agree to the precision's
rounding).
"""

from __future__ import annotations

import copy
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertModel

from ..data.embedding_shards import iterate_texts, text_source
from ..models.tite.modeling_tite import TiteModel
from ..models.tite.presets import TINY_PRESETS, TITE_PRESETS, tite_preset
from .timing import synchronize

WARMUP_BATCHES = 4
# quickstart corpus bundled with the package: the texts when none are given
BUNDLED_TEXTS = Path(__file__).resolve().parents[1] / "resources" / "quickstart_beir"


def corpus_texts(source: str | Path | None, count: int) -> tuple[list[str], str]:
    """``count`` texts: those of ``source`` (a BEIR folder, .jsonl, .tsv or .txt, as ``dense-encoders encode`` reads
    them; the bundled quickstart corpus when None), repeated in order as often as needed. Returns them and the
    source's name."""
    source = BUNDLED_TEXTS if source is None else source
    texts = [text for _, text in iterate_texts(text_source(str(source), "document"), allow_empty=False)]
    if not texts:
        raise ValueError(f"--texts {source}: no texts to encode")
    return [texts[index % len(texts)] for index in range(count)], str(source)


def _model_folder(model: torch.nn.Module, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _sentence_transformer(folder: Path, device: torch.device, dtype: torch.dtype, max_length: int):
    from ..checkpoints.loading import load_sentence_transformer

    pooling = None if (folder / "modules.json").is_file() else "cls"
    model = load_sentence_transformer(folder, pooling=pooling, device=str(device))
    model.to(dtype)
    model.max_seq_length = max_length
    return model


def _timed(function: Callable[[], object], device: torch.device) -> tuple[float, object]:
    synchronize(device)
    start = time.perf_counter()
    value = function()
    synchronize(device)
    return time.perf_counter() - start, value


def _bare_forward(model, features: list[dict], device: torch.device) -> Callable[[], list[torch.Tensor]]:
    moved = [{key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}
             for batch in features]

    def run():
        with torch.inference_mode():
            return [model(dict(batch), task="document")["sentence_embedding"] for batch in moved]

    return run


def end_to_end_report(*, device: torch.device, weights_dtype: str, presets: Sequence[str], bert_config: BertConfig,
                      texts: str | Path | None, num_texts: int, batch_size: int, max_length: int, seed: int = 0,
                      say: Callable[[str], None] = print) -> dict:
    """The end-to-end rates (module docstring) of BERT and every preset of ``presets`` on ``num_texts`` texts of
    ``texts``, in batches of ``batch_size``, truncated at ``max_length`` tokens, weights in ``weights_dtype``."""
    from ..tokenization import load_tokenizer

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[weights_dtype]
    corpus, source = corpus_texts(texts, num_texts)
    tokenizer = load_tokenizer()
    known = {**TITE_PRESETS, **TINY_PRESETS}
    unknown = [name for name in presets if name not in known]
    if unknown:
        raise ValueError(f"unknown TITE preset {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    bert_config = copy.deepcopy(bert_config)
    bert_config.vocab_size = len(tokenizer)
    bert_config._attn_implementation = "sdpa"
    builders = {f"BERT ({bert_config.num_hidden_layers}x{bert_config.hidden_size}, sdpa, cls)": lambda: BertModel(
        bert_config, add_pooling_layer=False)}
    for name in presets:
        builders[name] = lambda name=name: TiteModel(tite_preset(name, vocab_size=len(tokenizer)))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="dense-encoders-e2e-") as scratch:
        scratch = Path(scratch)
        source_file = scratch / "texts.jsonl"
        with source_file.open("w", encoding="utf-8") as handle:
            for index, text in enumerate(corpus):
                handle.write(json.dumps({"_id": str(index), "text": text}) + "\n")
        for index, (name, build) in enumerate(builders.items()):
            say(f"end to end: {name}")
            torch.manual_seed(seed)
            folder = _model_folder(build(), tokenizer, scratch / f"model-{index}")
            model = _sentence_transformer(folder, device, dtype, max_length)
            rows[name] = _measure(model, corpus, source_file, scratch / f"shards-{index}", batch_size, max_length,
                                  device)
    baseline = next(iter(rows.values()))
    for row in rows.values():
        for column in ("forward", "encode", "st_encode"):
            row[f"{column}_vs_bert"] = row[f"{column}_texts_per_s"] / baseline[f"{column}_texts_per_s"]
        row["encode_share_of_forward"] = row["encode_texts_per_s"] / row["forward_texts_per_s"]
    return {"source": source, "num_texts": num_texts, "batch_size": batch_size, "max_length": max_length,
            "weights_dtype": weights_dtype, "rows": rows}


def _measure(model, corpus: list[str], source_file: Path, shards: Path, batch_size: int, max_length: int,
             device: torch.device) -> dict:
    # the encoding stack (sentence-transformers' pipeline, shards): imported when the table is measured
    from ..evaluation.batch_pipeline import encode_batches
    from ..evaluation.corpus_encoding import encode_corpus, token_counts

    order = np.argsort(-token_counts(model, corpus, None, max_length), kind="stable")
    batches = [[corpus[position] for position in order[start : start + batch_size]]
               for start in range(0, len(order), batch_size)]
    tokenize_ms, features = [], []
    for batch in batches:
        start = time.perf_counter()
        features.append(model.preprocess(batch, task="document"))
        tokenize_ms.append((time.perf_counter() - start) * 1e3)
    forward = _bare_forward(model, features, device)
    warm = batches[:WARMUP_BATCHES]
    with torch.inference_mode():  # warm-up: kernels chosen for the first shapes, the pipeline's thread started
        for batch in features[:WARMUP_BATCHES]:
            model({key: value.to(device) if isinstance(value, torch.Tensor) else value
                   for key, value in batch.items()}, task="document")
        list(encode_batches(model, warm, task="document"))
        model.encode_document(sum(warm, []), batch_size=batch_size, show_progress_bar=False)
    forward_s, _ = _timed(forward, device)
    del features
    encode_s, shards_result = _timed(lambda: encode_corpus(
        model, source_file, shards, batch_size=batch_size, max_length=max_length, dtype="float32",
        show_progress_bar=False, shard_size=len(corpus)), device)
    st_s, st_vectors = _timed(lambda: model.encode_document(corpus, batch_size=batch_size, show_progress_bar=False,
                                                            convert_to_numpy=True), device)
    ours = np.concatenate([embeddings for _, embeddings, _ in shards_result.shards()]).astype(np.float32)
    difference = float(np.abs(ours - st_vectors).max())
    count = len(corpus)
    return {
        "tokenize_ms_per_batch": statistics.median(tokenize_ms),
        "tokenize_ms_total": sum(tokenize_ms),
        "forward_texts_per_s": count / forward_s,
        "encode_texts_per_s": count / encode_s,
        "st_encode_texts_per_s": count / st_s,
        "max_abs_difference_encode_vs_st": difference,
        "vector_scale": float(np.abs(st_vectors).max()),
    }


def format_end_to_end(result: dict) -> list[str]:
    """The end-to-end table (markdown lines)."""
    from .tables import render_table

    header = ["model", "tokenize ms/batch", "forward texts/s", "encode texts/s", "st.encode texts/s",
              "encode / forward", "forward vs BERT", "encode vs BERT", "st.encode vs BERT"]
    body = []
    for name, row in result["rows"].items():
        body.append([name, f"{row['tokenize_ms_per_batch']:.1f}", f"{row['forward_texts_per_s']:,.0f}",
                     f"{row['encode_texts_per_s']:,.0f}", f"{row['st_encode_texts_per_s']:,.0f}",
                     f"{100 * row['encode_share_of_forward']:.0f} %", f"{row['forward_vs_bert']:.2f}x",
                     f"{row['encode_vs_bert']:.2f}x", f"{row['st_encode_vs_bert']:.2f}x"])
    lines = [f"## End to end: {result['num_texts']:,} texts of {result['source']}, batches of "
             f"{result['batch_size']}, up to {result['max_length']} tokens, {result['weights_dtype']} weights", ""]
    lines += render_table(header, body)
    worst = max(result["rows"].values(), key=lambda row: row["max_abs_difference_encode_vs_st"])
    lines += ["", f"encode's vectors vs st.encode's: largest difference {worst['max_abs_difference_encode_vs_st']:.2g} "
              f"(vector entries up to {worst['vector_scale']:.3g}; batches are grouped by tokens in encode, by "
              "characters in st.encode).",
              "forward = the forward alone on batches tokenized and moved beforehand; encode = encode_corpus "
              "(`dense-encoders encode` after loading: scan, token counts, sorted batches, the tokenizer thread, "
              "the shard); st.encode = SentenceTransformer.encode_document; tokenize = model.preprocess of one "
              "sorted batch on one thread.", ""]
    return lines


__all__ = ["BUNDLED_TEXTS", "corpus_texts", "end_to_end_report", "format_end_to_end"]
