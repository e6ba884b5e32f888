"""Publishing subcommand: ``push`` a checkpoint folder to the Hub (:mod:`dense_encoders.hub`)."""

from __future__ import annotations

import sys

from .arguments import make_parser, parse

PUSH_EXAMPLES = """\
example:
  dense-encoders push runs/tite-msmarco --repo-id me/tite-2-late-msmarco --results eval/trec-dl-19.json \\
      --license apache-2.0

  # the run's records go up too only when named (the card says what they record)
  dense-encoders push runs/distilled --repo-id me/distilled --include 'distillation_*.json'
"""


def build_push_parser():
    from ..settings.hub import PushSettings

    parser = make_parser(
        "dense-encoders push",
        "Upload a checkpoint folder (safetensors weights, config with auto_map, remote code, tokenizer, "
        "sentence-transformers files and module folders) plus a model card generated from its records, in one "
        "commit. Any other file is refused by name unless --include names it; links are followed only inside the "
        "folder (or to a Hugging Face cache snapshot's blobs). The local folder is never modified. The token comes "
        "from --token, HF_TOKEN or `hf auth login`.",
        PUSH_EXAMPLES,
        (PushSettings,),
    )
    parser.add_argument("folder", help="Checkpoint folder written by save_pretrained / our trainers.")
    # one field, two exclusive flags; a repeatable flag: what HfArgumentParser does not declare from a field
    visibility = parser.add_mutually_exclusive_group()
    parser.add_argument("--private", group=visibility, action="store_true", default=None,
                        help="Create the repository private.")
    parser.add_argument("--public", group=visibility, action="store_false", dest="private", help="Create it public.")
    parser.add_argument("--include", action="append", metavar="PATTERN", default=[],
                        help="Also upload the folder's files this glob names (path inside the folder, e.g. "
                        "'distillation_*.json'); repeatable. Training state and pickles are never uploaded.")
    return parser


def push(argv: list[str]) -> int:
    from ..hub import PushError, push_to_hub  # slow to import (torch): only when the command runs

    options, flags = parse(build_push_parser(), argv)
    try:
        commit = push_to_hub(
            flags.folder, options.repo_id, private=flags.private, revision=options.revision,
            create_pr=options.create_pr, commit_message=options.commit_message, token=options.token,
            results=options.results, license=options.license, card=not options.no_card, endpoint=options.endpoint,
            include=flags.include, skip_nested_models=options.skip_nested_models,
        )
    except PushError as error:
        print(f"dense-encoders push: error: {error}", file=sys.stderr)
        return 2
    if not commit.changed:
        opened = "no commit made" + (", no pull request opened" if options.create_pr else "")
        print(f"nothing changed: {options.repo_id} at {options.revision or 'main'} already holds these files "
              f"({commit.commit_url}); {opened}")
        return 0
    pull_request = f" (pull request {commit.pr_url})" if commit.pr_url else ""
    print(f"pushed {flags.folder} -> {commit.commit_url}{pull_request}")
    return 0


EXPORT_EXAMPLES = """\
example:
  dense-encoders export runs/tite-msmarco        # onnx/model.onnx and openvino/openvino_model.xml
  dense-encoders push runs/tite-msmarco --repo-id me/tite-2-late-msmarco
"""


def build_export_parser():
    parser = make_parser(
        "dense-encoders export",
        "Write the model's transformer, exported for ONNX Runtime and OpenVINO (float32, dynamic batch and length), "
        "into the folder in sentence-transformers' backend layout: onnx/model.onnx and openvino/openvino_model.xml "
        "(+ .bin), which SentenceTransformer(folder, backend='onnx' | 'openvino') loads and push uploads. The "
        "exports are those --runtime makes and caches; the weights, config and code of the folder stay as they are.",
        EXPORT_EXAMPLES,
    )
    parser.add_argument("folder", help="Checkpoint folder of a bi-encoder (ours, or a sentence-transformers model).")
    from ..vectors import BACKEND_RUNTIMES

    parser.add_argument("--backends", nargs="+", choices=sorted(BACKEND_RUNTIMES), default=sorted(BACKEND_RUNTIMES),
                        help="The backends to write files for (default: both).")
    return parser


def export(argv: list[str]) -> int:
    from pathlib import Path

    from ..checkpoints.folder import refuse_folder_without_tokenizer
    from ..checkpoints.loading import load_sentence_transformer, model_fingerprint
    from ..evaluation.runtimes import write_backend_files

    parser = build_export_parser()
    options = parse(parser, argv)
    folder = Path(options.folder)
    if not (folder / "config.json").is_file():
        parser.error(f"{folder} is not a checkpoint folder (no config.json): give the folder "
                                    "save_pretrained wrote")
    refuse_folder_without_tokenizer(str(folder), "folder")
    model = load_sentence_transformer(str(folder), device="cpu")
    for path in write_backend_files(model, folder, model_fingerprint(model), tuple(options.backends)):
        print(f"wrote {path}")
    return 0


__all__ = ["build_export_parser", "build_push_parser", "export", "push"]
