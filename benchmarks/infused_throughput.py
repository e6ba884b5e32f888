"""Encode throughput of a cross-encoder-infused DE-2 vs its 6- and 12-layer sources
(*Can Cross Encoders Produce Useful Sentence Embeddings?*, Table 1).

Rows (all BERT-family, MiniLM width: 384 hidden, 12 heads, FFN 1536, vocab 30522, sdpa attention,
mean pooling over non-padding tokens, random weights with a fixed seed: speed does not depend on
the values)
    12-layer source   ``BertModel`` shaped like cross-encoder/ms-marco-MiniLM-L-12-v2's encoder
    6-layer source    the same with 6 layers (all-MiniLM-L6-v2's shape)
    DE-2-CE           ``InfusedDualEncoderModel.from_cross_encoder`` of the 12-layer model
                      (1 copied + 1 new layer)

Workload: ``--num-texts`` documents with a realistic length mix (MS MARCO-like passages, log-normal
median 80 tokens, clipped to [8, 256]), pre-tokenized, sorted by length and cut into batches of
``--batch-size`` (as sentence-transformers' ``encode`` batches), so tokenization is not timed.
Timing: ``eval()`` + ``inference_mode``; a warm-up pass, then ``--rounds`` rounds in which every
batch is run by every model back to back (order rotating), texts/s from each round's summed batch
times, the median round reported with the min-max range.

Layer-count bound: the speed-up if time were proportional to the number of encoder layers
(12 / 2 = 6x, 6 / 2 = 3x); "of bound" = measured speed-up / bound. The paper measured 5.15x for
12 -> 2 layers.

Usage (repository root)::

    python benchmarks/infused_throughput.py            # about 2 minutes on 2 idle CPU cores
    python benchmarks/infused_throughput.py --device cuda --num-texts 8192 --batch-size 256
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _report import command_line, device_name, emit, quiet_libraries, render_table, synchronize

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from transformers import BertConfig, BertForSequenceClassification, BertModel  # noqa: E402

from dense_encoders.models.infused import InfusedDualEncoderModel, mean_pool  # noqa: E402

MINILM = dict(vocab_size=30522, hidden_size=384, num_attention_heads=12, intermediate_size=1536,
              max_position_embeddings=512)


def build_models(device: torch.device) -> dict[str, tuple[torch.nn.Module, int]]:
    torch.manual_seed(0)
    config12 = BertConfig(**MINILM, num_hidden_layers=12, num_labels=1)
    config12._attn_implementation = "sdpa"
    cross_encoder = BertForSequenceClassification(config12).eval()
    config6 = BertConfig(**MINILM, num_hidden_layers=6)
    config6._attn_implementation = "sdpa"
    de2 = InfusedDualEncoderModel.from_cross_encoder(cross_encoder, num_copied_layers=1, num_new_layers=1)
    return {
        "12-layer source": (cross_encoder.bert.to(device), 12),
        "6-layer source": (BertModel(config6, add_pooling_layer=False).eval().to(device), 6),
        "DE-2-CE": (de2.eval().to(device), 2),
    }


def make_batches(num_texts: int, batch_size: int, seed: int, device: torch.device):
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(80), 0.5, size=num_texts)), 8, 256).astype(int)
    lengths = np.sort(lengths)[::-1]
    batches = []
    for start in range(0, num_texts, batch_size):
        chunk = lengths[start : start + batch_size]
        width = int(chunk.max())
        ids = torch.from_numpy(rng.integers(1000, 30000, size=(len(chunk), width)))
        mask = (torch.arange(width)[None, :] < torch.from_numpy(chunk.copy())[:, None]).long()
        batches.append((ids.masked_fill(mask == 0, 0).to(device), mask.to(device)))
    return batches, lengths


def encode(model, ids, mask):
    output = model(input_ids=ids, attention_mask=mask)
    return (output.pooler_output if isinstance(model, InfusedDualEncoderModel)
            else mean_pool(output.last_hidden_state, mask))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--num-texts", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    quiet_libraries()
    if options.threads:
        torch.set_num_threads(options.threads)
    device = torch.device(options.device)
    models = build_models(device)
    batches, lengths = make_batches(options.num_texts, options.batch_size, options.seed, device)
    names = list(models)
    with torch.inference_mode():
        for model, _ in models.values():  # warm-up
            encode(model, *batches[0])
        rounds = {name: [] for name in names}
        started = time.perf_counter()
        for round_index in range(options.rounds):
            spent = dict.fromkeys(names, 0.0)
            for batch_index, (ids, mask) in enumerate(batches):
                shift = (batch_index + round_index) % len(names)
                for name in names[shift:] + names[:shift]:
                    synchronize(device)
                    start = time.perf_counter()
                    encode(models[name][0], ids, mask)
                    synchronize(device)
                    spent[name] += time.perf_counter() - start
            for name in names:
                rounds[name].append(options.num_texts / spent[name])
        timed = time.perf_counter() - started
    median = {name: statistics.median(values) for name, values in rounds.items()}
    body = []
    for name in names:
        layers = models[name][1]
        cells = [name, str(layers), f"{median[name]:.1f}", f"{min(rounds[name]):.1f}-{max(rounds[name]):.1f}"]
        for source in ("12-layer source", "6-layer source"):
            speedup, bound = median[name] / median[source], models[source][1] / layers
            cells += [f"{speedup:.2f}x", f"{bound:.2f}x", f"{speedup / bound:.0%}"]
        body.append(cells)
    header = ["model", "layers", "texts/s", "range", "vs 12-layer", "bound", "of bound", "vs 6-layer", "bound",
              "of bound"]
    lines = [
        f"device={device_name(device)}  threads={torch.get_num_threads()}  torch={torch.__version__}",
        f"{options.num_texts} texts, length mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, max "
        f"{lengths.max()}; batches of {options.batch_size} sorted by length; {options.rounds} interleaved rounds "
        f"({timed:.0f} s timed)",
        "",
        *render_table(header, body),
        "",
        f"command: {command_line()}",
    ]
    emit("\n".join(lines), {"texts_per_s": median, "rounds": rounds, "layers": {n: m[1] for n, m in models.items()}},
         options.json)


if __name__ == "__main__":
    main()
