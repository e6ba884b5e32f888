"""Conversion subcommand: ``convert`` a checkpoint folder another implementation wrote
(:mod:`dense_encoders.checkpoints`)."""

from __future__ import annotations

from .arguments import make_parser, parse
from .checks import check_outputs

CONVERT_EXAMPLES = """\
examples:
  dense-encoders convert tite-2-late/ tite-2-late-converted/            # the TITE authors' TiteModel folder
  dense-encoders convert lir-tite-msmarco/ tite-msmarco/                # a Lightning IR bi-encoder with a TITE
  dense-encoders convert condenser-output/ condenser/ --skip-from 6     # luyug/Condenser: BERT + model.pt head
"""


# the formats `convert` reads (dense_encoders.checkpoints.SOURCE_FORMATS, whose modules import torch: tests check
# that these are their names)
FORMAT_NAMES = ("lightning-ir", "tite-authors", "condenser-reference")


def build_convert_parser():
    from ..settings.conversion import ConversionSettings

    parser = make_parser(
        "dense-encoders convert",
        "Convert a checkpoint folder that another implementation wrote into one of ours: safetensors weights, "
        "remote code (AutoModel.from_pretrained(OUT, trust_remote_code=True) needs no dense-encoders), the "
        "source's tokenizer, sentence-transformers files that reproduce the source's vectors, conversion.json and "
        f"a model card naming the source. The format is detected: {', '.join(FORMAT_NAMES)} (the examples show "
        "one folder of each).",
        CONVERT_EXAMPLES,
        (ConversionSettings,),
    )
    parser.add_argument("source", help="The folder to convert (it is only read), or a Hub id (org/name) to download.")
    parser.add_argument("output", help="Where the converted folder goes (new or empty; see --overwrite).")
    return parser


def _what_was_converted(record: dict) -> str:
    """The format and, where the format has one, whether a Condenser head was converted."""
    described = f"{record['source_format']}: {record.get('architecture', 'converted')}"
    if record.get("has_condenser_head") is True:
        described += (f" with the {record.get('head_layers')}-layer Condenser head of model.pt "
                      f"(skip_from {record.get('skip_from')})")
    elif record.get("has_condenser_head") is False:
        described += ", the encoder alone: the source has no model.pt, so no Condenser head was converted"
    return described


def convert(argv: list[str]) -> int:
    # slow to import (transformers' models, torch): only when the command runs
    from ..checkpoints import convert_checkpoint
    from ..checkpoints.folder import has_tokenizer_files
    from ..data.run_records import CONVERSION, read_record

    options, positionals = parse(build_convert_parser(), argv)
    check_outputs({"OUT": positionals.output}, {"SOURCE": positionals.source})
    output = convert_checkpoint(positionals.source, positionals.output, overwrite=options.overwrite,
                                skip_from=options.skip_from)
    record = read_record(output, CONVERSION)
    converted = f"converted {positionals.source} ({_what_was_converted(record)}) -> {output}"
    if has_tokenizer_files(output):
        print(f"{converted}; load it with AutoModel.from_pretrained({str(output)!r}, trust_remote_code=True) or "
              "SentenceTransformer(...)")
    else:  # the source had none: AutoTokenizer and SentenceTransformer cannot load the folder yet
        print(f"{converted}; it has no tokenizer, as {positionals.source} has none: save the one the source was "
              f"trained with into it (AutoTokenizer.from_pretrained(NAME).save_pretrained({str(output)!r})) before "
              "loading it with AutoTokenizer or SentenceTransformer")
    return 0


__all__ = ["FORMAT_NAMES", "build_convert_parser", "convert"]
