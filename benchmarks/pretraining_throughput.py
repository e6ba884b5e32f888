"""Pre-training throughput: Condenser and coCondenser vs plain BERT masked-LM, side by side.

Every row trains the SAME width/depth/vocabulary on the SAME synthetic batches, and every
row goes through the same code path as a real ``dense-encoders pretrain`` run:
``PreTrainingTrainer.training_step`` (forward + loss + backward; for the grad-cache row
that method dispatches to ``PreTrainingTrainer._grad_cache_step``), then gradient
clipping (the Trainer's default ``max_grad_norm=1.0``), ``AdamW.step()`` and ``zero_grad``.
The Trainer's own loop (data loading, scheduler, logging, callbacks) is left out: it costs
every row the same and would only add noise.

Rows
    BERT MLM (BertForMaskedLM)            transformers' BertForMaskedLM (the baseline)
    Condenser (head + late MLM)           CondenserForPreTraining
    coCondenser (+ span contrastive)      CoCondenserForPreTraining, whole batch in one graph
    coCondenser + grad cache (chunk=B/4)  CoCondenserForPreTraining through the gradient cache

Timing is interleaved: each round times ``--steps`` steps of every model (the order rotates
from round to round) and the table reports the median round, so machine noise hits all rows
alike. tokens/s counts NON-padding tokens (the attention mask's ones) per second.

Peak memory (CUDA only) is what ``torch.cuda.max_memory_allocated`` would report were the
row's model alone on the GPU: this model's parameters and AdamW state plus the peak the
step adds on top of everything resident (all models stay on the device for interleaving).

Usage (repository root)::

    PYTHONPATH=src python benchmarks/pretraining_throughput.py            # defaults below
    PYTHONPATH=src python benchmarks/pretraining_throughput.py --device cuda --preset bert-base \\
        --batch-size 64 --seq-len 128 --steps 20 --json results.json

Defaults are sized for about two minutes on 2 CPU cores.
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

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch.nn.functional as F
import transformers
from transformers import BertConfig, BertForMaskedLM
from transformers.modeling_outputs import MaskedLMOutput

from dense_encoders.models.condenser.modeling_condenser import CoCondenserForPreTraining, CondenserForPreTraining
from dense_encoders.models.condenser.presets import CONDENSER_PRESETS, condenser_preset
from dense_encoders.trainer.pretraining import PreTrainingArguments, PreTrainingTrainer

VOCAB_SIZE = 30522  # bert-base-uncased
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 101, 102, 103
FIRST_ORDINARY_ID = 104  # ids 0-103 are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK]
IGNORE_INDEX = -100

ROW_BERT = "BERT MLM (BertForMaskedLM)"
ROW_BERT_MASKED = "BERT MLM, masked positions only"
ROW_CONDENSER = "Condenser (head + late MLM)"
ROW_COCONDENSER = "coCondenser (+ span contrastive)"
ROW_GRAD_CACHE = "coCondenser + grad cache (chunk=B/4)"

# BertConfig fields the baseline copies from the Condenser config (everything that shapes compute)
SHARED_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id",
)


class MaskedPositionsBertForMaskedLM(BertForMaskedLM):
    """BertForMaskedLM with the vocabulary projection at masked positions only (same loss value).

    The like-for-like baseline: Condenser scores only masked positions too, so the ratio to this
    row is the cost of the Condenser head (and the contrastive loss) alone.
    """

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        states = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        selected = labels != IGNORE_INDEX
        return MaskedLMOutput(loss=F.cross_entropy(self.cls(states[selected]).float(), labels[selected]))


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Pre-training throughput of Condenser / coCondenser vs plain BERT MLM (same config, same batches).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--preset", default="small", choices=sorted(CONDENSER_PRESETS), help="Condenser config preset.")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="Rows per batch (coCondenser: spans, 2 per document).")
    parser.add_argument("--seq-len", type=int, default=128, help="Tokens per row incl. [CLS]/[SEP].")
    parser.add_argument("--steps", type=int, default=4, help="Timed optimizer steps per model per round.")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed optimizer steps per model before timing.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds; the median round is reported.")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"),
        help="Where to train.",
    )
    parser.add_argument(
        "--dtype", default=None, choices=("fp32", "bf16"),
        help="fp32, or bf16 autocast (torch.autocast; weights and optimizer stay fp32). "
        "Default: fp32 on cpu, bf16 on cuda.",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice).")
    parser.add_argument("--seed", type=int, default=0, help="Seed for weights, batches and dropout.")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="Also write the results as JSON.")
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this torch build.")
    if args.batch_size < 4 or args.batch_size % 2:
        parser.error(
            f"--batch-size {args.batch_size}: use an even number >= 4 (coCondenser needs sibling span pairs, "
            "and the grad-cache row needs more than one chunk of B/4 rows)."
        )
    max_positions = CONDENSER_PRESETS[args.preset]["max_position_embeddings"]
    if not 8 <= args.seq_len <= max_positions:
        parser.error(f"--seq-len {args.seq_len}: the {args.preset!r} preset allows 8..{max_positions}.")
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


# ------------------------------------------------------------------------------------------
# synthetic batches
# ------------------------------------------------------------------------------------------


def make_batch(batch_size: int, seq_len: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random ordinary tokens between [CLS] and [SEP]; a quarter of the rows get a random padding
    tail; 15 % of the ordinary real tokens are masked (80 % [MASK] / 10 % random / 10 % kept)."""
    lengths = torch.full((batch_size,), seq_len, dtype=torch.long)
    padded_rows = torch.randperm(batch_size, generator=generator)[: batch_size // 4]
    lengths[padded_rows] = torch.randint(max(3, seq_len // 4), seq_len, (len(padded_rows),), generator=generator)
    positions = torch.arange(seq_len).expand(batch_size, seq_len)
    attention_mask = (positions < lengths[:, None]).long()

    input_ids = torch.randint(FIRST_ORDINARY_ID, VOCAB_SIZE, (batch_size, seq_len), generator=generator)
    input_ids[:, 0] = CLS_ID
    input_ids[torch.arange(batch_size), lengths - 1] = SEP_ID
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD_ID)
    ordinary = (attention_mask == 1) & (positions > 0) & (positions < (lengths - 1)[:, None])

    masked = ordinary & (torch.rand(batch_size, seq_len, generator=generator) < 0.15)
    masked[:, 1] |= ~masked.any(dim=1)  # every row predicts at least one token
    labels = torch.where(masked, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    draw = torch.rand(batch_size, seq_len, generator=generator)
    input_ids = torch.where(masked & (draw < 0.8), torch.full_like(input_ids, MASK_ID), input_ids)
    random_ids = torch.randint(FIRST_ORDINARY_ID, VOCAB_SIZE, (batch_size, seq_len), generator=generator)
    input_ids = torch.where(masked & (draw >= 0.8) & (draw < 0.9), random_ids, input_ids)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": torch.zeros_like(input_ids),
        "labels": labels,
    }


# ------------------------------------------------------------------------------------------
# models and their training step
# ------------------------------------------------------------------------------------------


class Runner:
    """One row: a model, its AdamW optimizer, and the PreTrainingTrainer whose training_step it uses."""

    def __init__(self, name: str, model: torch.nn.Module, trainer_args: PreTrainingArguments, dtype: str):
        self.name = name
        self.trainer = PreTrainingTrainer(model=model, args=trainer_args)
        # set by Trainer's training loop, which we bypass; read by training_step / _grad_cache_step
        self.trainer.current_gradient_accumulation_steps = 1
        self.model = self.trainer.model  # moved to args.device by the Trainer
        self.device = self.trainer.args.device
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        self.max_grad_norm = trainer_args.max_grad_norm
        self.autocast = dtype == "bf16"
        self.last_loss = float("nan")
        self.parameters = sum(p.numel() for p in self.model.parameters())  # tied weights counted once
        self.static_bytes = 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())  # + exp_avg(_sq)

    def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        context = (
            torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
            if self.autocast
            else contextlib.nullcontext()
        )
        with context:
            loss = self.trainer.training_step(self.model, batch)
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss


def build_runners(args: argparse.Namespace, output_dir: str) -> tuple[list[Runner], object]:
    config = condenser_preset(args.preset, vocab_size=VOCAB_SIZE)
    bert_config = BertConfig(**{key: getattr(config, key) for key in SHARED_CONFIG_KEYS})
    chunk = max(1, args.batch_size // 4)

    def trainer_args(grad_cache_chunk_size: int | None = None) -> PreTrainingArguments:
        return PreTrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=args.batch_size,
            grad_cache_chunk_size=grad_cache_chunk_size,
            use_cpu=args.device == "cpu",
            report_to="none",
            seed=args.seed,
            dataloader_num_workers=0,
        )

    specs = [
        (ROW_BERT, lambda: BertForMaskedLM(bert_config), None),
        (ROW_BERT_MASKED, lambda: MaskedPositionsBertForMaskedLM(bert_config), None),
        (ROW_CONDENSER, lambda: CondenserForPreTraining(config), None),
        (ROW_COCONDENSER, lambda: CoCondenserForPreTraining(config), None),
        (ROW_GRAD_CACHE, lambda: CoCondenserForPreTraining(config), chunk),
    ]
    runners = []
    for name, build, grad_cache in specs:
        seed_everything(args.seed)  # same initial weights for the models that share a layout
        runners.append(Runner(name, build(), trainer_args(grad_cache), args.dtype))
    return runners, config


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------




def time_steps(runner: Runner, batches: list[dict[str, torch.Tensor]]) -> tuple[float, int | None]:
    """Seconds for ``len(batches)`` optimizer steps, and (CUDA) the step's peak memory above what was resident."""
    device = runner.device
    baseline = None
    synchronize(device)
    if device.type == "cuda":
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for batch in batches:
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
    with tempfile.TemporaryDirectory(prefix="pretraining_throughput_") as output_dir:
        runners, config = build_runners(args, output_dir)
    device = runners[0].device

    generator = torch.Generator().manual_seed(args.seed)
    timed = [make_batch(args.batch_size, args.seq_len, generator) for _ in range(args.steps)]
    warmup = [make_batch(args.batch_size, args.seq_len, generator) for _ in range(args.warmup)]
    timed = [{k: v.to(device) for k, v in batch.items()} for batch in timed]
    warmup = [{k: v.to(device) for k, v in batch.items()} for batch in warmup]
    tokens_per_round = sum(int(batch["attention_mask"].sum()) for batch in timed)
    padded_tokens_per_round = args.steps * args.batch_size * args.seq_len

    for runner in runners:  # untimed: allocator, kernels, optimizer state
        seed_everything(args.seed)
        for batch in warmup:
            runner.step(batch)

    seconds = {runner.name: [] for runner in runners}
    peak_extra = {runner.name: 0 for runner in runners}
    for round_index in range(args.rounds):
        shift = round_index % len(runners)
        for runner in runners[shift:] + runners[:shift]:  # rotate the order: no row always goes first
            seed_everything(args.seed + 1 + round_index)  # same dropout stream for every row
            elapsed, extra = time_steps(runner, timed)
            seconds[runner.name].append(elapsed)
            if extra is not None:
                peak_extra[runner.name] = max(peak_extra[runner.name], extra)
            print(
                f"  round {round_index + 1}/{args.rounds}  {runner.name:<38} {elapsed / args.steps * 1e3:9.1f} ms/step",
                file=sys.stderr,
                flush=True,
            )

    for runner in runners:
        if not math.isfinite(runner.last_loss):
            raise RuntimeError(f"{runner.name}: non-finite loss {runner.last_loss}")

    baseline_rate = tokens_per_round / statistics.median(seconds[ROW_BERT])
    masked_baseline_rate = tokens_per_round / statistics.median(seconds[ROW_BERT_MASKED])
    rows = []
    for runner in runners:
        median = statistics.median(seconds[runner.name])
        rate = tokens_per_round / median
        rates = [tokens_per_round / s for s in seconds[runner.name]]
        rows.append(
            {
                "model": runner.name,
                "class": type(runner.model).__name__,
                "grad_cache_chunk_size": runner.trainer.args.grad_cache_chunk_size,
                "parameters": runner.parameters,
                "ms_per_step": median / args.steps * 1e3,
                "tokens_per_s": rate,
                "tokens_per_s_min": min(rates),
                "tokens_per_s_max": max(rates),
                "ratio_to_bert_mlm": rate / baseline_rate,
                "ratio_to_masked_bert_mlm": rate / masked_baseline_rate,
                "peak_memory_mib": (
                    (runner.static_bytes + peak_extra[runner.name]) / 2**20 if device.type == "cuda" else None
                ),
                "round_seconds": seconds[runner.name],
                "last_loss": runner.last_loss,
            }
        )

    return {
        "command": command_line(),
        "config": {
            "preset": args.preset,
            "layers": config.num_hidden_layers,
            "head_layers": config.n_head_layers,
            "skip_from": config.skip_from,
            "hidden": config.hidden_size,
            "heads": config.num_attention_heads,
            "intermediate": config.intermediate_size,
            "vocab": config.vocab_size,
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "grad_cache_chunk": max(1, args.batch_size // 4),
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "non_padding_tokens_per_step": tokens_per_round / args.steps,
            "padding_fraction": 1 - tokens_per_round / padded_tokens_per_round,
            "device": device_name(device),
            "dtype": args.dtype,
            "threads": torch.get_num_threads(),
            "attention": getattr(runners[0].model.config, "_attn_implementation", None),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "seed": args.seed,
        },
        "rows": rows,
    }


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------






def format_table(results: dict) -> str:
    c = results["config"]
    lines = [
        f"preset={c['preset']}  layers={c['layers']} (+{c['head_layers']} head, skip_from={c['skip_from']})  "
        f"hidden={c['hidden']}  heads={c['heads']}  ffn={c['intermediate']}  vocab={c['vocab']}",
        f"batch={c['batch_size']}  seq_len={c['seq_len']}  "
        f"non-padding tokens/step={c['non_padding_tokens_per_step']:.0f} "
        f"({c['padding_fraction']:.1%} padding)  grad-cache chunk={c['grad_cache_chunk']}",
        f"device={c['device']}  dtype={c['dtype']}  threads={c['threads']}  attention={c['attention']}  "
        f"torch={c['torch']}  transformers={c['transformers']}",
        f"timing: {c['warmup']} warm-up + {c['rounds']} interleaved rounds x {c['steps']} steps "
        "(fwd + bwd + clip + AdamW via PreTrainingTrainer.training_step); median round reported",
        "",
    ]
    header = ["model", "params (M)", "ms/step", "tokens/s", "tokens/s range", "vs BERT MLM", "vs masked-only BERT",
              "peak mem (MiB)"]
    body = []
    for row in results["rows"]:
        body.append(
            [
                row["model"],
                f"{row['parameters'] / 1e6:.2f}",
                f"{row['ms_per_step']:.1f}",
                f"{row['tokens_per_s']:,.0f}",
                f"{row['tokens_per_s_min']:,.0f}-{row['tokens_per_s_max']:,.0f}",
                f"{row['ratio_to_bert_mlm']:.2f}x",
                f"{row['ratio_to_masked_bert_mlm']:.2f}x",
                "-" if row["peak_memory_mib"] is None else f"{row['peak_memory_mib']:,.0f}",
            ]
        )
    lines += render_table(header, body)
    lines += [
        "",
        "note: BertForMaskedLM projects all B x L positions onto the vocabulary; Condenser/coCondenser project only",
        "      the masked positions (twice: head MLM + late MLM). At small widths that projection dominates the step;",
        "      the masked-only BERT row removes that difference, so its ratio is the cost of the head itself.",
        "      tokens/s = non-padding tokens per second; peak mem = CUDA only (this model's weights + AdamW state +",
        "      the step's peak above what was resident).",
        "",
        f"command: {results['command']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    return run_script(argv, parse_args, run, format_table)


if __name__ == "__main__":
    main()
