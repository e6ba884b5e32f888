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
    parser = make_parser(
        "dense-encoders push",
        "Upload a checkpoint folder (safetensors weights, config with auto_map, remote code, tokenizer, "
        "sentence-transformers files and module folders) plus a model card generated from its records, in one "
        "commit. Any other file is refused by name unless --include names it; links are followed only inside the "
        "folder (or to a Hugging Face cache snapshot's blobs). The local folder is never modified. The token comes "
        "from --token, HF_TOKEN or `hf auth login`.",
        PUSH_EXAMPLES,
    )
    parser.add_argument("folder", help="Checkpoint folder written by save_pretrained / our trainers.")
    parser.add_argument("--repo-id", required=True, help="user/name or org/name.")
    visibility = parser.add_mutually_exclusive_group()
    parser.add_argument("--private", group=visibility, action="store_true", default=None,
                        help="Create the repository private.")
    parser.add_argument("--public", group=visibility, action="store_false", dest="private", help="Create it public.")
    parser.add_argument("--revision", help="Branch to commit to (created from main when missing).")
    parser.add_argument("--create-pr", action="store_true", help="Open a pull request instead of committing.")
    parser.add_argument("--commit-message",
                        help="Message of the commit (default: 'Upload FOLDER with dense-encoders').")
    parser.add_argument("--results", nargs="+", help="Results JSONs of `dense-encoders evaluate` of this folder, for "
                        "the card; a file whose model_fingerprint is another model's is refused.")
    parser.add_argument("--license", help="License id for the card metadata, e.g. apache-2.0.")
    parser.add_argument("--no-card", action="store_true", help="Upload the folder's own README.md instead.")
    parser.add_argument("--include", action="append", metavar="PATTERN", default=[],
                        help="Also upload the folder's files this glob names (path inside the folder, e.g. "
                        "'distillation_*.json'); repeatable. Training state and pickles are never uploaded.")
    parser.add_argument("--skip-nested-models", action="store_true",
                        help="Leave the folders of other models inside FOLDER local (e.g. infuse's random/ and "
                        "initial/: push each to its own repository); without it such a folder is refused.")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the stored login).")
    parser.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co).")
    return parser


def push(argv: list[str]) -> int:
    from ..hub import PushError, push_to_hub  # slow to import (torch): only when the command runs

    options = parse(build_push_parser(), argv)
    try:
        commit = push_to_hub(
            options.folder, options.repo_id, private=options.private, revision=options.revision,
            create_pr=options.create_pr, commit_message=options.commit_message, token=options.token,
            results=options.results, license=options.license, card=not options.no_card, endpoint=options.endpoint,
            include=options.include, skip_nested_models=options.skip_nested_models,
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
    print(f"pushed {options.folder} -> {commit.commit_url}{pull_request}")
    return 0


__all__ = ["build_push_parser", "push"]
