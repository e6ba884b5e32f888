"""The ``dense-encoders`` command line.

Subcommands:
  quickstart   pre-train a tiny Condenser on the bundled corpus, save, reload, encode (offline)
  pretrain     Condenser / coCondenser pre-training on transformers.Trainer

Run ``dense-encoders SUBCOMMAND --help`` for every flag.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PRETRAIN_EXAMPLES = """\
examples:
  # tiny Condenser from scratch on the bundled corpus (seconds on a laptop CPU)
  dense-encoders pretrain condenser --output_dir runs/condenser-tiny --max_steps 50

  # paper recipe: warm start from BERT-base, 6 early + 6 late layers, 2 head layers
  torchrun --nproc_per_node 8 -m dense_encoders.cli pretrain condenser \\
      --backbone bert-base-uncased --skip_from 6 --corpus corpus.jsonl --max_seq_length 128 \\
      --output_dir runs/condenser --per_device_train_batch_size 64 --max_steps 100000 --bf16

  # coCondenser with a gradient cache (large contrastive batch, small memory)
  dense-encoders pretrain cocondenser --init_from runs/condenser --corpus corpus.jsonl \\
      --output_dir runs/cocondenser --per_device_train_batch_size 1024 --grad_cache_chunk_size 64

  # every flag may also come from a JSON or YAML file
  dense-encoders pretrain condenser pretrain.yaml
"""


def _pretrain(argv: list[str]) -> int:
    from transformers import HfArgumentParser

    from .trainer.pretraining import ARCHITECTURES, PreTrainingArguments, PreTrainingSetup, pretrain

    parser = HfArgumentParser(
        (PreTrainingSetup, PreTrainingArguments),
        prog="dense-encoders pretrain {condenser,cocondenser}",
        description="Condenser / coCondenser pre-training (Gao & Callan 2021, 2022) on transformers.Trainer.",
        epilog=PRETRAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    architecture, rest = argv[0], argv[1:]
    if architecture not in ARCHITECTURES:
        print(f"dense-encoders pretrain: unknown architecture {architecture!r}; choose one of "
              f"{sorted(ARCHITECTURES)}.", file=sys.stderr)
        return 2
    if len(rest) == 1 and rest[0].endswith((".json", ".yaml", ".yml")):
        path = Path(rest[0])
        if not path.is_file():
            print(f"dense-encoders pretrain: config file {path} does not exist.", file=sys.stderr)
            return 2
        read = parser.parse_json_file if path.suffix == ".json" else parser.parse_yaml_file
        setup, args = read(str(path))
        setup.architecture = architecture
    else:
        setup, args = parser.parse_args_into_dataclasses(["--architecture", architecture, *rest])
    output = pretrain(setup, args)
    _end_distributed()
    print(f"Saved the pre-trained {architecture} to {output}")
    return 0


def _end_distributed() -> None:
    """Under torchrun: shut the process group down together, not at interpreter exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _quickstart(argv: list[str]) -> int:
    from .quickstart import run_quickstart

    parser = argparse.ArgumentParser(
        prog="dense-encoders quickstart",
        description="Offline first run: pre-train a tiny Condenser on the bundled corpus for a few steps, save it "
        "(safetensors + remote code + sentence-transformers files), reload it with AutoModel and "
        "SentenceTransformer, and encode two sentences.",
    )
    parser.add_argument("--output-dir", default="quickstart-output", help="Where to write the model (default: %(default)s).")
    parser.add_argument("--max-steps", type=int, default=100, help="Pre-training steps (default: %(default)s).")
    parser.add_argument("--seed", type=int, default=42)
    options = parser.parse_args(argv)
    run_quickstart(output_dir=options.output_dir, max_steps=options.max_steps, seed=options.seed)
    return 0


COMMANDS = {"quickstart": _quickstart, "pretrain": _pretrain}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"dense-encoders: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:
        return COMMANDS[argv[0]](argv[1:])
    except (ValueError, FileNotFoundError) as error:  # bad flags, paths or files: say what, not a traceback
        print(f"dense-encoders {argv[0]}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
