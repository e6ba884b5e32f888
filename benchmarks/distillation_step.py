"""One distillation training step: BERT-base-shaped student vs TITE students of the same width.

Every row trains on the SAME batch (per round) with the SAME objective, through the same code as a
real ``dense-encoders distill`` run: a :class:`~dense_encoders.trainer.distillation.DualEncoder`
inside a minimal :class:`~dense_encoders.trainer.distillation.DistillationTrainer` (prepared by its
accelerator, so ``--dtype bf16`` autocasts the student's forward exactly as training does), whose
``training_step`` runs the forward of queries and documents and ``compute_loss`` (student scores =
einsum of query and document vectors, in-batch scores = queries @ documents.T,
``DistillationObjective("margin_mse+kl+infonce")``, loss = sum over queries / number of queries,
i.e. the mean) and the backward; then ``clip_grad_norm_(..., 1.0)``, the trainer's own optimizer
(``create_optimizer``: fused AdamW, lr 2e-5, the ``DistillationArguments`` defaults) ``step()`` and
``zero_grad()``. The Trainer's loop (data loading, scheduler, logging) is left out: it costs every
row the same and would only add noise.

Rows
    BERT-base (cls)     transformers' ``BertModel(BertConfig(), add_pooling_layer=False)`` (12 x 768,
                        12 heads, FFN 3072, vocab 30522), sdpa attention, pooling "cls": the baseline
    tite-2-late         ``TiteModel(tite_preset("tite-2-late"))`` (same width / depth / FFN), sdpa,
                        pooling "pooler" (TITE's one vector per text)
    tite-2-staggered    the same for ``tite-2-staggered`` (``--presets`` picks the TITE rows)

All models are randomly initialised with the same seed and train with dropout as configured (0.1,
training mode).

Workload (one batch per round, identical for every row)
    ``--queries`` (8) queries, each with ``--docs-per-query`` (8) documents, built from synthetic
    records (texts of random whole-word vocabulary entries, random teacher scores ~ N(0, 4^2)) by
    ``DistillationCollator`` with the bundled tokenizer: queries are exactly ``--query-length`` (32)
    tokens and documents exactly ``--doc-length`` (256) tokens incl. [CLS]/[SEP], so nothing is
    padded: query_input_ids [8, 32], document_input_ids [64, 256], teacher_scores [8, 8],
    document_mask all True.

Timing
    ``--warmup`` untimed steps per model (the first one also measures the saved activations, see
    below), then ``--rounds`` rounds; in every round each model runs ``--steps`` steps on that round's
    batch, the model order rotating from round to round, so machine noise (other jobs on the box)
    is spread over all rows alike. Each step is timed on its own (synchronised on CUDA); a round's
    steps/s = steps / the round's summed step times. The table reports the MEDIAN round, the min-max
    range over rounds, and "vs BERT" = steps/s / BERT's steps/s (the same for samples/s: every row
    runs the same batch).

Memory
    activations  the bytes of every tensor autograd saves for backward during the forward (and the
                 loss), measured exactly with ``torch.autograd.graph.saved_tensors_hooks``: each
                 distinct storage counted once (by data_ptr, its full size), parameters left out
                 (they are counted below); under bf16 autocast the bf16 copies of the weights ARE
                 counted (they are allocated for the step). This is what the forward leaves alive
                 for the backward: the activation part of the step's peak.
    static       parameters + gradients + AdamW state (exp_avg, exp_avg_sq), computed from the
                 parameter count (all fp32: 16 bytes per parameter).
    computed peak  static + activations: COMPUTED, not measured. (With ``zero_grad(set_to_none)``
                 gradients and activations do not fully coexist, so it slightly overstates the step;
                 workspace and temporaries are not in it.) On CPU this is the only per-row figure: the
                 process' peak RSS mixes all rows.
    CUDA peak    (``--device cuda`` only) measured: ``torch.cuda.max_memory_allocated`` over a step
                 (reset before each timed step) minus what was allocated before it, plus this row's
                 parameters and AdamW state, i.e. what the step would peak at were this row's model
                 alone on the GPU (all models stay on the device for interleaving); the max over steps.

FLOP bound
    Multiply-adds (MACs) of the forward's matrix products for the step's texts (``--queries`` x
    query length + ``--queries`` x ``--docs-per-query`` x document length), per layer from the config's
    ``sequence_lengths``, with the formula of ``tite_throughput.py`` (imported from it; see its
    docstring). FLOP-bound = BERT MACs / row MACs: the speed-up the row could show if step time were
    proportional to matrix work (the backward costs about 2x the forward for every row alike, so the
    ratio holds for the whole step); efficiency = measured vs BERT / FLOP-bound.
    On CPU, efficiency can exceed 100 %: with attention dropout in training, CPU sdpa takes the math
    path and materialises the [heads, L, L] scores, softmax and dropout mask of every layer, work
    and memory that grow with L^2 and that TITE's pooled layers mostly avoid.

Usage (repository root)::

    python benchmarks/distillation_step.py                  # defaults: 7m11s on 2 idle CPU cores (measured)
    python benchmarks/distillation_step.py --presets tite-2-late --rounds 5 --steps 3
    python benchmarks/distillation_step.py --device cuda --rounds 5 --steps 10 --json distillation_step.json

Defaults are the batch above with the fewest steps that still give a median: 1 warm-up step and 3
rounds x 1 step per model, i.e. 4 steps per model. On 2 CPU cores one fp32 step of BERT takes about
75 s (tite-2-late 20 s, tite-2-staggered 9 s), so the whole default run took 7m11s (the
``python benchmarks/distillation_step.py --json /tmp/distillation_step.json`` run, idle cores); a
2-4 minute budget does not fit this workload (use fewer ``--rounds`` / ``--presets``, or a smaller
batch). Memory: BERT's step saves 17,605 MiB (17.2 GiB) of activations in fp32 on CPU (19,267 MiB
with weights, gradients and AdamW state), so the CPU run needs some 20 GiB of free RAM.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from _report import command_line, device_name, render_table, run_script, synchronize
from tite_throughput import bert_macs, cpu_pressure, tite_macs

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import transformers
from transformers import BertConfig, BertModel

from dense_encoders.data.distillation import DistillationCollator
from dense_encoders.models.tite import TiteModel
from dense_encoders.models.tite.presets import TITE_PRESETS, tite_preset
from dense_encoders.tokenization import load_tokenizer
from dense_encoders.trainer.distillation import DistillationArguments, DistillationTrainer, DualEncoder
from dense_encoders.trainer.losses import DistillationObjective

LOSSES = "margin_mse+kl+infonce"  # the DistillationSetup default (TITE Sec. 3.4)
BERT_ROW = "BERT-base (cls)"
DEFAULT_PRESETS = ("tite-2-late", "tite-2-staggered")
MAX_GRAD_NORM = 1.0  # TrainingArguments' default
TEACHER_SCALE = 4.0  # teacher scores ~ N(0, 4^2): InfoNCE (theta 3) finds in-sample negatives


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Steps/s and memory of one distillation training step (margin_mse+kl+infonce, AdamW) for a "
        "BERT-base student vs TITE students of the same width, on the same batch.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"),
        help="Where to train.",
    )
    parser.add_argument(
        "--dtype", default=None, choices=("fp32", "bf16"),
        help="fp32, or bf16 autocast of the student's forward (the trainer's bf16=True; weights, gradients and "
        "AdamW stay fp32). Default: fp32 on cpu, bf16 on cuda.",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved timed rounds; the median is reported.")
    parser.add_argument("--steps", type=int, default=1, help="Timed steps per model per round.")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed steps per model before timing (>= 1: the "
                        "first one measures the saved activations).")
    parser.add_argument("--queries", type=int, default=8, help="Queries per step.")
    parser.add_argument("--docs-per-query", type=int, default=8, help="Documents per query.")
    parser.add_argument("--query-length", type=int, default=32, help="Tokens per query incl. [CLS]/[SEP].")
    parser.add_argument("--doc-length", type=int, default=256, help="Tokens per document incl. [CLS]/[SEP].")
    parser.add_argument(
        "--presets", nargs="+", default=list(DEFAULT_PRESETS), choices=sorted(TITE_PRESETS), metavar="PRESET",
        help=f"TITE presets to run (BERT always runs). Choices: {', '.join(sorted(TITE_PRESETS))}.",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice).")
    parser.add_argument("--seed", type=int, default=0, help="Seed for weights, batches and dropout.")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="Also write the results as JSON.")
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this torch build.")
    for name in ("rounds", "steps", "warmup", "queries", "docs_per_query"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.docs_per_query < 2:
        parser.error(f"--docs-per-query {args.docs_per_query}: {LOSSES} has pairwise losses, which need >= 2")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    args.presets = list(dict.fromkeys(args.presets))  # drop repeats, keep order
    for name in ("query_length", "doc_length"):
        length = getattr(args, name)
        if not 3 <= length <= 512:
            parser.error(f"--{name.replace('_', '-')} {length}: use 3..512 (BERT-base has 512 positions)")
    for name in args.presets:
        limit = TITE_PRESETS[name].get("max_position_embeddings", 512)
        if max(args.query_length, args.doc_length) > limit:
            parser.error(f"--presets {name}: it takes at most {limit} tokens; shorten the texts or leave it out.")
    return args


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed)


# ------------------------------------------------------------------------------------------
# the batch: synthetic records through DistillationCollator
# ------------------------------------------------------------------------------------------


class BatchMaker:
    """Synthetic records (random whole-word vocabulary entries, random teacher scores) collated by
    ``DistillationCollator``, checked to be exactly ``queries x query_length`` and
    ``queries * docs_per_query x doc_length`` tokens with no padding."""

    def __init__(self, args: argparse.Namespace, min_documents: int):
        self.tokenizer = load_tokenizer()
        # lower-case ascii letters only: the basic tokenizer keeps them whole, WordPiece maps each to one token
        self.words = sorted(w for w in self.tokenizer.get_vocab() if w.isascii() and w.isalpha() and w.islower())
        self.args = args
        self.collator = DistillationCollator(
            self.tokenizer,
            documents_per_query=args.docs_per_query,
            sampling="random",
            query_max_length=args.query_length,
            document_max_length=args.doc_length,
            min_documents=min_documents,
            seed=args.seed,
        )
        self.generator = torch.Generator().manual_seed(args.seed)

    def _text(self, tokens: int) -> str:
        picks = torch.randint(len(self.words), (tokens - 2,), generator=self.generator).tolist()  # + [CLS], [SEP]
        return " ".join(self.words[i] for i in picks)

    def __call__(self) -> dict[str, torch.Tensor]:
        a = self.args
        records = [
            {
                "query_id": f"q{index}",
                "query": self._text(a.query_length),
                "documents": [self._text(a.doc_length) for _ in range(a.docs_per_query)],
                "scores": (TEACHER_SCALE * torch.randn(a.docs_per_query, generator=self.generator)).tolist(),
            }
            for index in range(a.queries)
        ]
        batch = self.collator(records)
        texts = [r["query"] for r in records] + [d for r in records for d in r["documents"]]
        untruncated = {len(ids) for ids in self.tokenizer(texts)["input_ids"]}
        expected = {
            "query_input_ids": (a.queries, a.query_length),
            "document_input_ids": (a.queries * a.docs_per_query, a.doc_length),
            "teacher_scores": (a.queries, a.docs_per_query),
        }
        for key, shape in expected.items():
            if tuple(batch[key].shape) != shape:
                raise RuntimeError(f"collated {key} has shape {tuple(batch[key].shape)}, expected {shape}")
        if not (batch["query_attention_mask"].all() and batch["document_attention_mask"].all()
                and batch["document_mask"].all()) or untruncated != {a.query_length, a.doc_length}:
            raise RuntimeError(f"synthetic texts did not tokenize to exactly {a.query_length} / {a.doc_length} tokens")
        return batch


# ------------------------------------------------------------------------------------------
# models and their training step
# ------------------------------------------------------------------------------------------


class SavedTensors:
    """``saved_tensors_hooks`` that add up the bytes of every distinct storage saved for backward
    (parameters excluded)."""

    def __init__(self, model: torch.nn.Module):
        self.parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.storages: dict[int, int] = {}
        self.tensors = 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.tensors += 1
        with contextlib.suppress(RuntimeError, NotImplementedError):  # tensors without a storage: not counted
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer not in self.parameters:
                self.storages[pointer] = max(self.storages.get(pointer, 0), storage.nbytes())
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


class Runner:
    """One row: a DualEncoder student inside a minimal DistillationTrainer, and the trainer's optimizer."""

    def __init__(self, name: str, encoder: torch.nn.Module, pooling: str, macs, args: argparse.Namespace,
                 output_dir: str):
        self.name = name
        self.pooling = pooling
        self.macs = macs  # length -> forward multiply-adds of one text
        trainer_args = DistillationArguments(
            output_dir=output_dir,
            per_device_train_batch_size=args.queries,
            max_grad_norm=MAX_GRAD_NORM,
            bf16=args.dtype == "bf16",
            use_cpu=args.device == "cpu",
            seed=args.seed,
            dataloader_num_workers=0,
            report_to="none",
        )
        self.trainer = DistillationTrainer(
            model=DualEncoder(encoder, pooling=pooling, similarity="dot"),
            args=trainer_args,
            objective=DistillationObjective(LOSSES),
        )
        self.device = self.trainer.args.device
        # what Trainer.train does before its loop: the accelerator wraps the forward (bf16: autocast,
        # outputs to fp32), and the optimizer comes from the trainer's own arguments
        self.model = self.trainer.accelerator.prepare(self.trainer.model)
        self.optimizer = self.trainer.create_optimizer()
        optim = getattr(self.trainer.args.optim, "value", self.trainer.args.optim)
        fused = " fused" if self.optimizer.defaults.get("fused") else ""
        self.optimizer_name = f"{type(self.optimizer).__name__}{fused} (optim={optim})"
        self.attention = encoder.config._attn_implementation
        self.parameters = sum(p.numel() for p in self.model.parameters())
        parameter_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.state_bytes = 3 * parameter_bytes  # parameters + exp_avg + exp_avg_sq (resident between steps)
        self.static_bytes = 4 * parameter_bytes  # + gradients
        self.activation_bytes = None
        self.saved_tensor_count = None
        self.last_loss = math.nan

    def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        num_items = self.trainer._get_num_items_in_batch([batch], self.device)  # the step's queries
        loss = self.trainer.training_step(self.model, batch, num_items)  # forward + loss + backward
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_GRAD_NORM)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def measured_step(self, batch: dict[str, torch.Tensor]) -> None:
        """An untimed step that records the tensors saved for backward."""
        saved = SavedTensors(self.model)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            self.last_loss = float(self.step(batch))
        self.activation_bytes, self.saved_tensor_count = saved.bytes, saved.tensors


def build_runners(args: argparse.Namespace, output_dir: str) -> list[Runner]:
    config = BertConfig()  # bert-base-uncased shape: 12 x 768, 12 heads, FFN 3072, vocab 30522, dropout 0.1
    config._attn_implementation = "sdpa"
    seed_everything(args.seed)
    bert = BertModel(config, add_pooling_layer=False)
    if bert.config._attn_implementation != "sdpa":
        raise RuntimeError(f"BertModel came up with attention {bert.config._attn_implementation!r}, not sdpa")
    runners = [Runner(BERT_ROW, bert, "cls", lambda length: bert_macs(config, length), args, output_dir)]
    for name in args.presets:
        tite_config = tite_preset(name, vocab_size=config.vocab_size)
        tite_config._attn_implementation = "sdpa"
        seed_everything(args.seed)
        model = TiteModel(tite_config)
        if model.config._attn_implementation != "sdpa":
            raise RuntimeError(f"{name} came up with attention {model.config._attn_implementation!r}, not sdpa")
        runners.append(Runner(name, model, "pooler", lambda length, c=tite_config: tite_macs(c, length), args,
                              output_dir))
    return runners


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------


def time_step(runner: Runner, batch: dict[str, torch.Tensor]) -> tuple[float, int | None]:
    """Seconds of one step, and (CUDA) its peak allocation above what was allocated before it."""
    device = runner.device
    baseline = None
    synchronize(device)
    if device.type == "cuda":
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    loss = runner.step(batch)
    synchronize(device)
    elapsed = time.perf_counter() - start
    runner.last_loss = float(loss)
    extra = torch.cuda.max_memory_allocated(device) - baseline if baseline is not None else None
    return elapsed, extra


def run(args: argparse.Namespace) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    with tempfile.TemporaryDirectory(prefix="distillation_step_") as output_dir:
        runners = build_runners(args, output_dir)
    device = runners[0].device
    make_batch = BatchMaker(args, runners[0].trainer.objective.min_documents)

    def moved(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(device) for key, value in batch.items()}

    print(f"built {len(runners)} models; warming up", file=sys.stderr, flush=True)
    warmup = moved(make_batch())
    for runner in runners:  # untimed: allocator, kernels, AdamW state; the first step measures activations
        seed_everything(args.seed)
        started = time.perf_counter()
        runner.measured_step(warmup)
        for _ in range(args.warmup - 1):
            runner.step(warmup)
        print(f"  warm-up {runner.name:<18} {time.perf_counter() - started:7.1f} s", file=sys.stderr, flush=True)

    seconds = {runner.name: [] for runner in runners}  # [round][step]
    peak_extra = {runner.name: 0 for runner in runners}
    pressure = []
    started = time.perf_counter()
    for round_index in range(args.rounds):
        batch = moved(make_batch())
        shift = round_index % len(runners)
        for runner in runners[shift:] + runners[:shift]:  # rotate: no row always runs first / after the same row
            seed_everything(args.seed + 1 + round_index)  # same dropout stream for every row
            times = []
            for _ in range(args.steps):
                elapsed, extra = time_step(runner, batch)
                times.append(elapsed)
                if extra is not None:
                    peak_extra[runner.name] = max(peak_extra[runner.name], extra)
            seconds[runner.name].append(times)
        pressure.append(cpu_pressure())
        shown = "n/a" if pressure[-1] is None else f"{pressure[-1]:.0f}%"
        line = "  ".join(f"{r.name} {args.steps / sum(seconds[r.name][-1]):.3g}" for r in runners)
        print(f"round {round_index + 1}/{args.rounds} steps/s: {line}  [{time.perf_counter() - started:.0f}s, "
              f"CPU pressure {shown}]", file=sys.stderr, flush=True)
    timed_seconds = time.perf_counter() - started

    for runner in runners:
        if not math.isfinite(runner.last_loss):
            raise RuntimeError(f"{runner.name}: non-finite loss {runner.last_loss}")

    texts = {"query": (args.queries, args.query_length),
             "document": (args.queries * args.docs_per_query, args.doc_length)}
    macs = {r.name: sum(count * r.macs(length) for count, length in texts.values()) for r in runners}
    bert = runners[0]
    bert_rate = statistics.median(args.steps / sum(t) for t in seconds[bert.name])
    bert_peak = bert.static_bytes + bert.activation_bytes
    rows = []
    for runner in runners:
        rates = [args.steps / sum(t) for t in seconds[runner.name]]
        rate = statistics.median(rates)
        peak = runner.static_bytes + runner.activation_bytes
        cuda_peak = runner.state_bytes + peak_extra[runner.name] if device.type == "cuda" else None
        bert_cuda_peak = bert.state_bytes + peak_extra[bert.name] if device.type == "cuda" else None
        rows.append({
            "model": runner.name,
            "pooling": runner.pooling,
            "attention": runner.attention,
            "parameters": runner.parameters,
            "steps_per_s": rate,
            "steps_per_s_min": min(rates),
            "steps_per_s_max": max(rates),
            "ms_per_step": 1e3 / rate,
            "ratio_to_bert": rate / bert_rate,
            # per round, BERT's time / this row's time in the same round (noise that hits a round hits both)
            "paired_ratio_to_bert": statistics.median(
                sum(b) / sum(s) for b, s in zip(seconds[bert.name], seconds[runner.name])
            ),
            "forward_gmacs": macs[runner.name] / 1e9,
            "flop_bound_ratio": macs[bert.name] / macs[runner.name],
            "efficiency": rate / bert_rate / (macs[bert.name] / macs[runner.name]),
            "activation_bytes": runner.activation_bytes,
            "saved_tensors": runner.saved_tensor_count,
            "activation_ratio_to_bert": runner.activation_bytes / bert.activation_bytes,
            "static_bytes": runner.static_bytes,
            "computed_peak_bytes": peak,
            "computed_peak_ratio_to_bert": peak / bert_peak,
            "cuda_peak_bytes": cuda_peak,
            "cuda_peak_ratio_to_bert": None if cuda_peak is None else cuda_peak / bert_cuda_peak,
            "last_loss": runner.last_loss,
            "step_seconds": seconds[runner.name],
        })
    return {
        "command": command_line(),
        "config": {
            "device": device_name(device),
            "dtype": args.dtype,
            "threads": torch.get_num_threads(),
            "attention": "sdpa",
            "losses": LOSSES,
            "optimizer": bert.optimizer_name,
            "learning_rate": bert.trainer.args.learning_rate,
            "max_grad_norm": MAX_GRAD_NORM,
            "queries": args.queries,
            "docs_per_query": args.docs_per_query,
            "query_length": args.query_length,
            "doc_length": args.doc_length,
            "rounds": args.rounds,
            "steps": args.steps,
            "warmup": args.warmup,
            "seed": args.seed,
            "timed_seconds": timed_seconds,
            "cpu_pressure_avg10": pressure,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "rows": rows,
    }


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def format_report(results: dict) -> str:
    c = results["config"]
    documents = c["queries"] * c["docs_per_query"]
    lines = [
        (f"device={c['device']}  dtype={c['dtype']}  threads={c['threads']}  attention=sdpa  torch={c['torch']}  "
         f"transformers={c['transformers']}  python={c['python']}"),
        (f"batch: {c['queries']} queries x {c['query_length']} tokens + {documents} documents "
         f"({c['docs_per_query']} per query) x {c['doc_length']} tokens, no padding; losses {c['losses']}"),
        (f"step: DistillationTrainer.training_step (forward + loss + backward) + clip_grad_norm_ "
         f"{c['max_grad_norm']:g} "
         f"+ {c['optimizer']} (lr {c['learning_rate']:g}) step + zero_grad; dropout on"),
        (f"timing: {c['warmup']} warm-up step(s) per model, then {c['rounds']} rounds x {c['steps']} step(s) per "
         "model, models interleaved (rotating order); steps/s = median round, range = min-max round"),
    ]
    samples = [value for value in c["cpu_pressure_avg10"] if value is not None]
    if samples:
        lines.append(
            f"CPU pressure (PSI some avg10) after each round: median {statistics.median(samples):.0f}%, max "
            f"{max(samples):.0f}%" + ("" if max(samples) < 20 else
                                      "  <- OTHER JOBS COMPETED FOR THE CORES: ratios are unreliable; "
                                      "rerun on idle cores")
        )
    lines += [f"timed part: {c['timed_seconds']:.0f} s", ""]

    rows = results["rows"]
    header = ["model", "params (M)", "steps/s", "range", "ms/step", "vs BERT", "fwd GMACs", "FLOP-bound",
              "efficiency"]
    body = [[
        row["model"],
        f"{row['parameters'] / 1e6:.1f}",
        f"{row['steps_per_s']:.3g}",
        f"{row['steps_per_s_min']:.3g}-{row['steps_per_s_max']:.3g}",
        f"{row['ms_per_step']:,.0f}",
        f"{row['ratio_to_bert']:.2f}x",
        f"{row['forward_gmacs']:,.0f}",
        f"{row['flop_bound_ratio']:.2f}x",
        f"{row['efficiency']:.0%}",
    ] for row in rows]
    lines += ["speed", *render_table(header, body), ""]

    cuda = any(row["cuda_peak_bytes"] is not None for row in rows)
    header = ["model", "activations (MiB)", "vs BERT", "params+grads+AdamW (MiB)", "computed peak (MiB)", "vs BERT"]
    if cuda:
        header += ["CUDA peak (MiB)", "vs BERT"]
    body = []
    for row in rows:
        cells = [
            row["model"],
            mib(row["activation_bytes"]),
            f"{row['activation_ratio_to_bert']:.2f}x",
            mib(row["static_bytes"]),
            mib(row["computed_peak_bytes"]),
            f"{row['computed_peak_ratio_to_bert']:.2f}x",
        ]
        if cuda:
            cells += [mib(row["cuda_peak_bytes"]), f"{row['cuda_peak_ratio_to_bert']:.2f}x"]
        body.append(cells)
    lines += ["memory", *render_table(header, body), ""]
    cuda_note = (" CUDA peak = measured max_memory_allocated of a step, as if the row's model were alone on the"
                 " GPU." if cuda else "")
    lines += [
        "vs BERT = the row's value / BERT's. FLOP-bound = BERT's forward MACs / the row's (matrix products, real",
        "lengths); efficiency = measured steps/s ratio / FLOP-bound. activations = bytes saved for backward",
        "(saved_tensors_hooks, distinct storages, parameters excluded), measured; params+grads+AdamW = 16 bytes per",
        "fp32 parameter, computed; computed peak = their sum (COMPUTED, not measured)." + cuda_note,
        "",
        f"command: {results['command']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    return run_script(argv, parse_args, run, format_report)


if __name__ == "__main__":
    main()
