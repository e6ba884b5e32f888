"""Evaluation subcommands: ``evaluate`` (retrieval quality of an encoder) and ``layerwise``."""

from __future__ import annotations

from .arguments import make_parser, parse
from .checks import check_device, check_model, check_outputs

# ------------------------------------------------------------------------------------------------ evaluate

EVALUATE_EXAMPLES = """\
examples:
  # any sentence-transformers model, as its own configuration prescribes, on a BEIR folder or a Hub dataset
  dense-encoders evaluate sentence-transformers/all-MiniLM-L6-v2 data/beir-scifact --output scifact.json
  dense-encoders evaluate sentence-transformers/all-MiniLM-L6-v2 BeIR/scifact --output scifact.json

  # the first-stage run on the train queries (for score-teacher --run), from an encoder or from BM25
  dense-encoders evaluate runs/tite data/msmarco --split train --k 100 --run-output tite.train.trec
  dense-encoders evaluate bm25 data/msmarco --split train --k 100 --run-output bm25.train.trec

  # a plain transformers checkpoint: name its pooling; our models (TITE, Condenser) need none
  dense-encoders evaluate bert-base-uncased data/beir-scifact --pooling cls --similarity dot

  # STSB as a search task: pairs scored >= 0.5 x 5 are relevant, the other second sentences distractors
  dense-encoders evaluate runs/de-2-ce stsbenchmark.tsv --split test --pair-threshold 0.5 --pair-scale 5

  # prompts, separate max lengths, cached embeddings, FAISS, and a cross-encoder re-ranking the top 100
  dense-encoders evaluate runs/tite data/msmarco --query-max-length 32 --document-max-length 512 \\
      --query-prompt "query: " --cache-dir .embeddings --backend faiss --rerank cross-encoder/ms-marco-MiniLM-L6-v2
"""


def build_evaluate_parser():
    from ..settings.evaluation import DEFAULT_MEASURES, EvaluationArguments

    parser = make_parser(
        "dense-encoders evaluate",
        "Encode a corpus and its queries, search (exact or FAISS), and compute "
        f"{', '.join(DEFAULT_MEASURES)} with ir-measures; writes a results JSON.",
        EVALUATE_EXAMPLES,
        (EvaluationArguments,),
    )
    parser.add_argument("model", help="A folder or Hub id: sentence-transformers model, our model, or any AutoModel; "
                        "or bm25 for the lexical baseline (bm25s, English stopwords).")
    parser.add_argument("data", help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv; each also .gz), a "
                        "(query, positive) pairs file, a graded pairs file (sentence1, sentence2, score), or a Hub "
                        "dataset id in BEIR's or MTEB's layout (BeIR/scifact, mteb/scifact; --dataset-revision).")
    return parser


def evaluate(argv: list[str]) -> int:
    # slow to import (sentence-transformers, torch): only when the command runs
    from ..evaluation import evaluate_retrieval, format_summary
    from ..evaluation.harness import BM25

    args, positionals = parse(build_evaluate_parser(), argv)
    check_device(args.device)
    if positionals.model != BM25:
        check_model(positionals.model)
    check_model(args.rerank, "--rerank")
    check_outputs({"--output": args.output, "--run-output": args.run_output, "--cache-dir": args.cache_dir},
                  {"MODEL": None if positionals.model == BM25 else positionals.model, "DATA": positionals.data,
                   "--rerank": args.rerank}, shards={"--corpus-embeddings": args.corpus_embeddings})
    results = evaluate_retrieval(positionals.model, positionals.data, args=args)
    print(format_summary(results))
    if args.output:
        print(f"results: {args.output}")
    return 0


# ------------------------------------------------------------------------------------------------ layerwise

LAYERWISE_EXAMPLES = """\
examples:
  dense-encoders layerwise --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 \\
      --dual-encoder sentence-transformers/msmarco-MiniLM-L-12-v3 --data scifact nfcorpus --output-dir layerwise
  dense-encoders layerwise --cross-encoder runs/ce --dual-encoder runs/de --data scifact --layers 0 1 2 --copies first
  dense-encoders layerwise --cross-encoder runs/ce --dual-encoder runs/de --data BeIR/scifact BeIR/nfcorpus
"""


def build_layerwise_parser():
    from ..settings.layerwise import LayerwiseSettings

    return make_parser(
        "dense-encoders layerwise",
        "Hits@10 / MRR@10 of every layer's mean-pooled embeddings of a cross-encoder (each text paired with "
        "itself) and of a dual encoder, per dataset, with a paired t-test across datasets ("
        "Can Cross Encoders Produce Useful Sentence Embeddings?, Figures 3-5). Writes layerwise.csv, "
        "layerwise.json and layerwise.png.",
        LAYERWISE_EXAMPLES,
        (LayerwiseSettings,),
    )


def layerwise(argv: list[str]) -> int:
    # slow to import (sentence-transformers, torch): only when the command runs
    from ..evaluation.layerwise import format_layerwise, layerwise_analysis

    (options,) = parse(build_layerwise_parser(), argv)
    check_outputs({"--output-dir": options.output_dir},
                  {"--cross-encoder": options.cross_encoder, "--dual-encoder": options.dual_encoder,
                   "--data": options.data})
    results = layerwise_analysis(
        options.cross_encoder, options.dual_encoder, options.data, split=options.split, layers=options.layers,
        copies=options.copies, batch_size=options.batch_size, max_length=options.max_length,
        output_dir=options.output_dir, show_progress_bar=not options.no_progress,
        pair_threshold=options.pair_threshold, pair_scale=options.pair_scale,
        trust_remote_code=options.trust_remote_code, overwrite_output_dir=options.overwrite_output_dir,
        revision=options.dataset_revision,
    )
    print(format_layerwise(results))
    print(f"wrote {options.output_dir}/layerwise.csv, layerwise.json, layerwise.png")
    return 0


__all__ = ["build_evaluate_parser", "build_layerwise_parser", "evaluate", "layerwise"]
