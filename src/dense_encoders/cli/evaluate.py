"""Evaluation subcommands: ``evaluate`` (retrieval quality of an encoder) and ``layerwise``."""

from __future__ import annotations

from ..vectors import SIMILARITIES
from .arguments import make_parser, parse
from .checks import add_graded_pair_flags, check_device, check_model, positive_int

# ------------------------------------------------------------------------------------------------ evaluate

EVALUATE_EXAMPLES = """\
examples:
  # any sentence-transformers model, as its own configuration prescribes
  dense-encoders evaluate sentence-transformers/all-MiniLM-L6-v2 data/beir-scifact --output scifact.json

  # a plain transformers checkpoint: name its pooling; our models (TITE, Condenser) need none
  dense-encoders evaluate bert-base-uncased data/beir-scifact --pooling cls --similarity dot

  # STSB as a search task: pairs scored >= 0.5 x 5 are relevant, the other second sentences distractors
  dense-encoders evaluate runs/de-2-ce stsbenchmark.tsv --split test --pair-threshold 0.5 --pair-scale 5

  # prompts, separate max lengths, cached embeddings, FAISS, and a cross-encoder re-ranking the top 100
  dense-encoders evaluate runs/tite data/msmarco --query-max-length 32 --document-max-length 512 \\
      --query-prompt "query: " --cache-dir .embeddings --backend faiss --rerank cross-encoder/ms-marco-MiniLM-L6-v2
"""


def build_evaluate_parser():
    from ..evaluation.metrics import DEFAULT_MEASURES

    parser = make_parser(
        "dense-encoders evaluate",
        "Encode a corpus and its queries, search (exact or FAISS), and compute "
        f"{', '.join(DEFAULT_MEASURES)} with ir-measures; writes a results JSON.",
        EVALUATE_EXAMPLES,
    )
    parser.add_argument("model", help="A folder or Hub id: sentence-transformers model, our model, or any AutoModel.")
    parser.add_argument("data", help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv), a (query, "
                        "positive) pairs file, or a graded pairs file (sentence1, sentence2, score).")
    parser.add_argument("--split", default="test", help="qrels split of a BEIR folder, or the rows of a graded pairs "
                        "tsv with a split column (default: %(default)s).")
    add_graded_pair_flags(parser)
    parser.add_argument("--pooling", choices=["cls", "mean"], help="Pooling of a plain transformers checkpoint.")
    parser.add_argument("--similarity", choices=SIMILARITIES, help="Default: what the model declares.")
    parser.add_argument("--query-prompt", help="Prefix of every query (default: the model's 'query' prompt).")
    parser.add_argument("--document-prompt",
                        help="Prefix of every document (default: the model's 'document' prompt).")
    parser.add_argument("--query-max-length", type=positive_int, help="Token limit of queries (default: the model's).")
    parser.add_argument("--document-max-length", type=positive_int,
                        help="Token limit of documents (default: the model's).")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="Encoding batch size (default: %(default)s).")
    parser.add_argument("--k", type=positive_int, default=1000,
                        help="Documents retrieved per query (default: %(default)s).")
    parser.add_argument("--backend", choices=["exact", "faiss"], default="exact", help="Search (default: %(default)s).")
    parser.add_argument("--cache-dir", help="Cache embeddings here (safetensors), keyed by model, settings and texts.")
    parser.add_argument("--corpus-embeddings", metavar="DIR",
                        help="Embedding shards of this corpus (`dense-encoders encode`), searched shard by shard "
                        "instead of encoding the documents; refused when model, prompt, length or ids differ.")
    parser.add_argument("--rerank", metavar="CROSS_ENCODER",
                        help="Re-score the top of the run with this cross-encoder.")
    parser.add_argument("--rerank-top-k", type=positive_int, default=100,
                        help="Documents re-scored per query (default: %(default)s).")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: sentence-transformers' choice).")
    parser.add_argument("--output", help="Write the results JSON here.")
    parser.add_argument("--run-output", help="Write the first-stage run here (TREC format).")
    parser.add_argument("--no-progress", action="store_true", help="No progress bars.")
    parser.add_argument("--relevance-level", type=int, default=1, metavar="N",
                        help="Grade from which RR, Recall and Hits count a document as relevant (TREC DL: 2); "
                        "nDCG stays graded; evaluated queries have a document at or above it (default: %(default)s).")
    parser.add_argument("--allow-empty-documents", action="store_true",
                        help="Keep corpus documents without title or text (with a warning); refused by default.")
    parser.add_argument("--allow-missing-weights", action="store_true",
                        help="Evaluate a checkpoint whose weights miss (or add) tensors of its model; refused by "
                        "default.")
    return parser


def evaluate(argv: list[str]) -> int:
    from ..evaluation import evaluate_retrieval, format_summary

    options = parse(build_evaluate_parser(), argv)
    check_device(options.device)
    check_model(options.model)
    check_model(options.rerank, "--rerank")
    if options.relevance_level < 1:
        raise ValueError(f"--relevance-level {options.relevance_level}: give a grade >= 1 (TREC DL convention: 2)")
    results = evaluate_retrieval(
        options.model,
        options.data,
        split=options.split,
        k=options.k,
        similarity=options.similarity,
        search_backend=options.backend,
        cross_encoder=options.rerank,
        rerank_top_k=options.rerank_top_k,
        output=options.output,
        run_output=options.run_output,
        pooling=options.pooling,
        device=options.device,
        batch_size=options.batch_size,
        query_prompt=options.query_prompt,
        document_prompt=options.document_prompt,
        query_max_length=options.query_max_length,
        document_max_length=options.document_max_length,
        cache_dir=options.cache_dir,
        show_progress_bar=not options.no_progress,
        allow_missing_weights=options.allow_missing_weights,
        relevance_level=options.relevance_level,
        allow_empty_documents=options.allow_empty_documents,
        pair_threshold=options.pair_threshold,
        pair_scale=options.pair_scale,
        corpus_embeddings=options.corpus_embeddings,
    )
    print(format_summary(results))
    if options.output:
        print(f"results: {options.output}")
    return 0


# ------------------------------------------------------------------------------------------------ layerwise

LAYERWISE_EXAMPLES = """\
examples:
  dense-encoders layerwise --cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 \\
      --dual-encoder sentence-transformers/msmarco-MiniLM-L-12-v3 --data scifact nfcorpus --output-dir layerwise
  dense-encoders layerwise --cross-encoder runs/ce --dual-encoder runs/de --data scifact --layers 0 1 2 --copies first
"""


def build_layerwise_parser():
    parser = make_parser(
        "dense-encoders layerwise",
        "Hits@10 / MRR@10 of every layer's mean-pooled embeddings of a cross-encoder (each text paired with "
        "itself) and of a dual encoder, per dataset, with a paired t-test across datasets ("
        "Can Cross Encoders Produce Useful Sentence Embeddings?, Figures 3-5). Writes layerwise.csv, "
        "layerwise.json and layerwise.png.",
        LAYERWISE_EXAMPLES,
    )
    parser.add_argument("--cross-encoder", required=True,
                        help="Sequence-classification cross-encoder (folder or Hub id).")
    parser.add_argument("--dual-encoder", required=True, help="Dual encoder (folder or Hub id).")
    parser.add_argument("--data", nargs="+", required=True,
                        help="BEIR folder(s), pairs files or graded pairs files (e.g. STSB).")
    parser.add_argument("--split", default="test")
    add_graded_pair_flags(parser)
    parser.add_argument("--layers", type=int, nargs="+", help="Layers (0 = embeddings; default: all).")
    parser.add_argument("--copies", choices=["both", "first"], default="both",
                        help="Pool both copies of the (text, text) pair (default) or the first only.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, help="Token limit of a pair / a text (default: the tokenizer's).")
    parser.add_argument("--output-dir", default="layerwise",
                        help="Where the CSV, JSON and PNG go (default: %(default)s).")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def layerwise(argv: list[str]) -> int:
    from ..evaluation.layerwise import format_layerwise, layerwise_analysis

    options = parse(build_layerwise_parser(), argv)
    results = layerwise_analysis(
        options.cross_encoder, options.dual_encoder, options.data, split=options.split, layers=options.layers,
        copies=options.copies, batch_size=options.batch_size, max_length=options.max_length,
        output_dir=options.output_dir, show_progress_bar=not options.no_progress,
        pair_threshold=options.pair_threshold, pair_scale=options.pair_scale,
    )
    print(format_layerwise(results))
    print(f"wrote {options.output_dir}/layerwise.csv, layerwise.json, layerwise.png")
    return 0


__all__ = ["build_evaluate_parser", "build_layerwise_parser", "evaluate", "layerwise"]
