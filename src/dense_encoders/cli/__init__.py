"""The ``dense-encoders`` command line.

Subcommands:
  quickstart   distil all-MiniLM-L6-v2 into a TITE and a 2-layer student, evaluate, time, save (offline)
  pretrain     Condenser / coCondenser / TITE pre-training on transformers.Trainer
  evaluate     retrieval evaluation of an encoder on a BEIR folder or a pairs file
  encode       a corpus (or queries) into resumable embedding shards, across processes and GPUs
  index        a FAISS index (Flat, HNSW, IVF-PQ, ...) from embedding shards
  search       top-k of queries over embedding shards (exact, streamed) or a FAISS index -> TREC run
  score-teacher  score (query, document) candidates of a run with a cross-encoder -> training jsonl
  distill      distil teacher scores into any encoder (Margin-MSE, KL, InfoNCE, M3SE, ...)
  layerwise    per-layer retrieval quality of a cross-encoder's and a dual encoder's embeddings
  infuse       build and train a cross-encoder-infused dual encoder (DE-2-CE), retrieve + rerank report
  convert      a checkpoint folder another implementation wrote (TITE authors, Lightning IR, Condenser) -> ours
  export       write a folder's ONNX and OpenVINO files for sentence-transformers' backends (onnx/, openvino/)
  push         upload a checkpoint folder to the Hub in one commit, with a generated model card
  bench        encode-speed report: BERT, Condenser, every TITE preset, DE-2, with FLOP bounds and a plot
  recipes      the papers' training recipes (`--recipe NAME` on pretrain, distill, infuse), value by value

Run ``dense-encoders SUBCOMMAND --help`` for every flag. Flags are dashed (``--output-dir``); the
underscore spelling (``--output_dir``, as in ``TrainingArguments``) is the same flag. Every subcommand
also takes ``--config FILE`` (JSON or YAML: flag names to values, ``args`` for positionals); flags
given on the command line win over the file.

Errors in what was given (flags, paths, files, devices) are one or two lines on stderr and exit code 2;
Ctrl-C exits with 130 and names the checkpoint to resume from (``encode``: the command that continues).
``--debug`` (anywhere on the command line) or ``DENSE_ENCODERS_DEBUG=1`` shows the full traceback instead, for
bug reports, and transformers' "Loading weights" progress bar, hidden otherwise. (TrainingArguments' own
``debug`` field is ``--trainer-debug`` on pretrain and distill.)
"""

# One module per subcommand group (train, evaluate, hub, bench, quickstart) builds its parsers and runs
# the library; `arguments` holds the conventions they share. Library code never imports this package.
# A subcommand's module is imported when the subcommand runs or its parser is built, and `--help` builds
# only that parser from light modules (no torch, no model), so that help is quick: see `help_parser`.

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import shlex
import signal
import sys
from pathlib import Path

from .arguments import CommandParser, parse
from .arguments import expand_config_file as _expand_config_file_of_parser

# command -> (module of this package, its function running the command, its function building the parser)
_HOMES = {
    "quickstart": ("quickstart", "quickstart", "build_quickstart_parser"),
    "pretrain": ("train", "pretrain", "build_pretrain_parser"),
    "evaluate": ("evaluate", "evaluate", "build_evaluate_parser"),
    "encode": ("corpus", "encode", "build_encode_parser"),
    "index": ("corpus", "index", "build_index_parser"),
    "search": ("corpus", "search", "build_search_parser"),
    "score-teacher": ("train", "score_teacher", "build_score_teacher_parser"),
    "distill": ("train", "distill", "build_distill_parser"),
    "layerwise": ("evaluate", "layerwise", "build_layerwise_parser"),
    "infuse": ("train", "infuse", "build_infuse_parser"),
    "convert": ("convert", "convert", "build_convert_parser"),
    "push": ("hub", "push", "build_push_parser"),
    "export": ("hub", "export", "build_export_parser"),
    "bench": ("bench", "bench", "build_bench_parser"),
    "recipes": ("recipes", "recipes", "build_recipes_parser"),
}


def _imported(module: str, name: str):
    """A function of this package's ``module``, imported on first call (the modules import the library)."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(f".{module}", __name__), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``dense_encoders.cli.{module}.{name}``, imported when called."
    return call


COMMANDS = {command: _imported(module, run) for command, (module, run, _) in _HOMES.items()}
# each subcommand's parser, as it parses (pretrain, distill: with transformers' TrainingArguments)
PARSERS = {command: _imported(module, build) for command, (module, _, build) in _HOMES.items()}
# what to lower when a command runs out of memory
MEMORY_FLAGS = {
    "pretrain": "--per-device-train-batch-size (or set --grad-cache-chunk-size for coCondenser)",
    "distill": "--per-device-train-batch-size or --documents-per-query (or add --activation-checkpointing)",
    "evaluate": "--batch-size (or --document-max-length)",
    "encode": "--batch-size (or --shard-size, --max-length)",
    "search": "--k (or search a FAISS index)",
    "index": "--train-size",
    "layerwise": "--batch-size (or --max-length)",
    "infuse": "--batch-size (or --max-length)",
    "score-teacher": "--batch-size",
    "quickstart": "--batch-size",
    "bench": "--doc-batch / --query-batch",
}

# the commands that load no model when their inputs are embedding shards: the command registers our model families
# with transformers' Auto classes (which imports transformers' models, seconds of CPU) before every other command,
# and these only where they load a model (search's queries given as texts)
MODEL_FREE_COMMANDS = ("search", "index")

# the commands that work together when a launcher (torchrun, accelerate launch) starts several processes: training
# is one model across them (DDP), encode gives each process its own shards; every other command runs in one process
MULTI_PROCESS_COMMANDS = ("pretrain", "distill", "encode")


# (exit stack, --debug) of each command _run is running: what a command that loads a model sets up lasts as long
# as the command
_RUNNING: list[tuple[contextlib.ExitStack, bool]] = []


def register_model_families() -> None:
    """Our model families registered with transformers' Auto classes, as importing ``dense_encoders`` does
    elsewhere than in this command (which defers it: ``dense_encoders._is_the_command``); for the rest of the
    running command, transformers' loading bars hidden unless ``--debug`` (:func:`_model_loading_bars`). A command
    that loads no model imports neither (transformers alone takes about 0.4 s of CPU to import)."""
    import dense_encoders

    dense_encoders._register_auto_classes()
    if _RUNNING:
        stack, debug = _RUNNING[-1]
        stack.enter_context(_model_loading_bars(shown=debug))


@contextlib.contextmanager
def _command_running(debug: bool):
    """The span of one command: what :func:`register_model_families` set up for it is undone at its end."""
    with contextlib.ExitStack() as stack:
        _RUNNING.append((stack, debug))
        try:
            yield
        finally:
            _RUNNING.pop()


def _single_process_refusal(command: str) -> str | None:
    """Why ``command`` may not run as it was launched (several processes, ``WORLD_SIZE`` > 1), or None."""
    processes = os.environ.get("WORLD_SIZE", "1")
    if command in MULTI_PROCESS_COMMANDS or processes in ("", "0", "1"):
        return None
    return (f"{command} runs in one process, but {processes} were launched (WORLD_SIZE={processes}), each of "
            "which would do the whole work and write the same files; run it without torchrun or accelerate launch "
            f"(only {', '.join(MULTI_PROCESS_COMMANDS)} run across processes)")


def expand_config_file(parser: CommandParser | str, argv: list[str], strict: bool = False) -> list[str]:
    """:func:`.arguments.expand_config_file`, where ``parser`` may also be a subcommand's name (``"distill"``): the
    name is looked up here, so that ``arguments`` never imports this package (which imports it)."""
    if isinstance(parser, str):
        parser = PARSERS[parser]()
    return _expand_config_file_of_parser(parser, argv, strict)


def _is_out_of_memory(error: BaseException) -> bool:
    torch = sys.modules.get("torch")  # a torch error comes from a command that imported torch
    return isinstance(error, MemoryError) or (torch is not None and isinstance(error, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "out of memory" in str(error).lower())


def _asks_for_help(argv: list[str]) -> bool:
    """Whether a subcommand's arguments ask for its help (``-h`` / ``--help`` before any ``--``): argparse
    would print it whatever else is given."""
    end = argv.index("--") if "--" in argv else len(argv)
    return "-h" in argv[:end] or "--help" in argv[:end]


def help_parser(command: str, argv: list[str] = ()):
    """The parser whose help ``dense-encoders COMMAND ARGV --help`` prints, built without loading any model, torch or
    the library's training and evaluation code: the command's parser, or where that one needs transformers'
    ``TrainingArguments`` (``pretrain``, ``distill``), its ``build_..._help_parser`` (``pretrain ARCHITECTURE``:
    that architecture's options first)."""
    module, _, build = _HOMES[command]
    module = importlib.import_module(f".{module}", __name__)
    builder = getattr(module, f"build_{command.replace('-', '_')}_help_parser", None)
    return builder(list(argv)) if builder is not None else getattr(module, build)()


def help_text(command: str, argv: list[str] = ()) -> str:
    """What ``dense-encoders COMMAND ARGV --help`` prints (:func:`help_parser`)."""
    return help_parser(command, argv).format_help()


def _debug(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether tracebacks were asked for (``--debug`` before any ``--``, or DENSE_ENCODERS_DEBUG), and
    ``argv`` without the flag."""
    end = argv.index("--") if "--" in argv else len(argv)
    flagged = "--debug" in argv[:end]
    argv = [token for token in argv[:end] if token != "--debug"] + argv[end:]
    return flagged or os.environ.get("DENSE_ENCODERS_DEBUG", "") not in ("", "0"), argv


def _interrupted_message(command: str, argv: list[str]) -> str:
    """What to do after Ctrl-C: ``encode`` continues by the same command; training resumes from the last
    ``checkpoint-N`` of the output folder, when there is one."""
    parsed = parse.last
    output_dir = None
    for part in parsed if isinstance(parsed, tuple) else (parsed,):
        output_dir = output_dir or getattr(part, "output_dir", None)
    message = f"dense-encoders {command}: interrupted"
    if command == "encode":
        return f"{message}; finished shards are kept: continue with `{shlex.join(['dense-encoders', *argv])}`"
    if command not in ("pretrain", "distill"):
        return message
    checkpoints = []
    if output_dir and Path(output_dir).is_dir():
        checkpoints = [(int(match.group(1)), path) for path in Path(output_dir).iterdir()
                       if path.is_dir() and (match := re.fullmatch(r"checkpoint-(\d+)", path.name))]
    if checkpoints:
        return f"{message}; resume with --resume-from-checkpoint {max(checkpoints)[1]}"
    return f"{message}; no checkpoint was written yet" + (f" to {output_dir}" if output_dir else "")


@contextlib.contextmanager
def _model_loading_bars(shown: bool):
    """transformers' own progress bars ("Loading weights", once per command) hidden unless ``shown``; the
    Hub's download bars and every other bar stay as they are. Restored afterwards."""
    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as transformers_logging

    before, downloads = transformers_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    if not shown:
        transformers_logging.disable_progress_bar()  # turns the Hub's bars off too
        if downloads:
            hub_utils.enable_progress_bars()
    try:
        yield
    finally:
        if before and not shown:
            transformers_logging.enable_progress_bar()
            if not downloads:
                hub_utils.disable_progress_bars()


def main(argv: list[str] | None = None) -> int:
    """The ``dense-encoders`` command; ``argv`` None: the process's own arguments (the console script), whose exit
    then ignores a late Ctrl-C (:func:`_run`)."""
    if argv is not None:
        return _run(list(argv))
    try:
        code = _run(sys.argv[1:])
    finally:
        # the command is over: a Ctrl-C now could only break the interpreter's exit (atexit callbacks, with
        # "Exception ignored ... KeyboardInterrupt" and a traceback) and change nothing
        with contextlib.suppress(ValueError):  # signals are set from the main thread only
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code == 130:
        # interrupted, its folder left resumable and the line printed: end now, not after the interpreter's
        # teardown of torch and transformers (2-3 s on 2 cores), which would keep the user waiting on a Ctrl-C
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    return code


def _run(argv: list[str]) -> int:
    debug, argv = _debug(argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"dense-encoders: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    command = argv[0]
    if _asks_for_help(argv[1:]):
        print(help_text(command, argv[1:]), end="")
        return 0
    parse.last = None
    if (refusal := _single_process_refusal(command)) is not None:
        print(f"dense-encoders {command}: error: {refusal}", file=sys.stderr)
        return 2
    try:
        with _command_running(debug):
            if command not in MODEL_FREE_COMMANDS:
                register_model_families()
            return COMMANDS[command](argv[1:])
    except KeyboardInterrupt:
        if debug:
            raise
        print(_interrupted_message(command, argv), file=sys.stderr)
        return 130
    except (ValueError, OSError) as error:  # bad flags, paths, files or devices: say what, not a traceback
        if debug:
            raise
        print(f"dense-encoders {command}: error: {error}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:
        if debug or not _is_out_of_memory(error):
            raise
        print(f"dense-encoders {command}: out of memory ({str(error).splitlines()[0][:200]}). Lower "
              f"{MEMORY_FLAGS.get(command, 'the batch size')} and run again.", file=sys.stderr)
        return 3


__all__ = ["COMMANDS", "MEMORY_FLAGS", "MULTI_PROCESS_COMMANDS", "PARSERS", "expand_config_file", "help_parser",
           "help_text", "main"]
