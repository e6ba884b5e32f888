"""Corpus-scale subcommands: ``encode`` (texts -> embedding shards), ``index`` (shards -> FAISS index) and
``search`` (shards or index + queries -> TREC run)."""

from __future__ import annotations

import sys
from pathlib import Path

from .arguments import make_parser, parse
from .checks import check_device, check_model, check_outputs
from .train import end_distributed

ENCODE_EXAMPLES = """\
examples:
  # MS MARCO's 8.8M passages on 4 GPUs: each process encodes its own slice of 100k-text shards
  torchrun --nproc_per_node 4 -m dense_encoders.cli encode runs/tite-msmarco collection.tsv --output emb/msmarco

  # the queries, with the model's query prompt and length
  dense-encoders encode runs/tite-msmarco queries.dev.small.tsv --queries --output emb/msmarco-dev-queries

  # the corpus of a Hub dataset (BEIR's or MTEB's layout), at a pinned revision
  dense-encoders encode runs/tite-msmarco BeIR/scifact --dataset-revision main --output emb/scifact-hub

  # one process driving two GPUs through sentence-transformers' multi-process pool
  dense-encoders encode sentence-transformers/all-MiniLM-L6-v2 data/beir-scifact --output emb/scifact \\
      --devices cuda:0 cuda:1

  # interrupted? run the same command again: finished shards are kept, the rest is encoded
"""


def build_encode_parser():
    from ..settings.corpus import EncodingSettings

    parser = make_parser(
        "dense-encoders encode",
        "Encode a corpus (or, with --queries, a query set) into embedding shards: safetensors files of "
        "--shard-size texts with their ids, and a manifest recording the model, pipeline, prompt, length, dtype "
        "and the source's checksum. Streams the texts (one shard in memory), resumes an interrupted run, and "
        "splits the shards across processes under torchrun / accelerate launch.",
        ENCODE_EXAMPLES,
        (EncodingSettings,),
    )
    parser.add_argument("model", help="A folder or Hub id: sentence-transformers model, our model, or any AutoModel.")
    parser.add_argument("texts", help="A BEIR folder (its corpus.jsonl, or queries.jsonl with --queries), a .jsonl "
                        "with _id (or id, docid), title and text (or contents), a .tsv of id<TAB>text, or a .txt with "
                        "one text per line (ids: line numbers from 1), each also .gz; or a Hub dataset id in BEIR's or "
                        "MTEB's layout (BeIR/scifact; its corpus, or its queries with --queries; --dataset-revision).")
    return parser


def encode(argv: list[str]) -> int:
    # slow to import (sentence_transformers via evaluation, torch): only when the command runs
    from ..evaluation.corpus_encoding import encode_corpus

    options, positionals = parse(build_encode_parser(), argv)
    check_model(positionals.model, "model")
    check_device(options.device)
    for device in options.devices or []:
        check_device(device, "--devices")
    check_outputs({"--output": options.output}, {"MODEL": positionals.model, "TEXTS": positionals.texts})
    shards = encode_corpus(
        positionals.model, positionals.texts, options.output, side="query" if options.queries else "document",
        shard_size=options.shard_size, dtype=options.dtype, batch_size=options.batch_size, prompt=options.prompt,
        max_length=options.max_length, pooling=options.pooling, normalize=options.normalize, device=options.device,
        devices=options.devices, allow_empty=options.allow_empty_documents,
        allow_missing_weights=options.allow_missing_weights, trust_remote_code=options.trust_remote_code,
        show_progress_bar=not options.no_progress, revision=options.dataset_revision, runtime=options.runtime,
    )
    end_distributed()
    if shards is not None:
        print(f"{shards.count} {shards.side} embeddings (dimension {shards.dimension}, {len(shards)} shards) in "
              f"{shards.folder}")
    return 0


# ------------------------------------------------------------------------------------------------ index

INDEX_EXAMPLES = """\
examples:
  dense-encoders index emb/msmarco --faiss "IVF65536,PQ64" --train-size 1000000 --output emb/msmarco/ivfpq.faiss
  dense-encoders index emb/scifact --faiss HNSW32
  dense-encoders index emb/scifact --faiss Flat
"""


def build_index_parser():
    from ..settings.corpus import IndexSettings

    parser = make_parser(
        "dense-encoders index",
        "Build a FAISS index (inner product; cosine models are normalised) from embedding shards: trained on a "
        "sample when the index type needs it, filled shard by shard, saved to disk. Uses the GPUs when faiss has "
        "them, the CPU otherwise.",
        INDEX_EXAMPLES,
        (IndexSettings,),
    )
    parser.add_argument("shards", help="A folder written by `dense-encoders encode`.")
    return parser


def index(argv: list[str]) -> int:
    # slow to import (sentence_transformers via evaluation, torch): only when the command runs
    from ..data.embedding_shards import EmbeddingShards
    from ..evaluation.shard_search import build_faiss_index

    options, positionals = parse(build_index_parser(), argv)
    shards = EmbeddingShards.open(positionals.shards)
    if shards.side != "document":
        raise ValueError(f"{shards.folder} holds query embeddings: index a corpus")
    name = "".join(c if c.isalnum() else "-" for c in options.faiss).strip("-")
    output = Path(options.output) if options.output else shards.folder / f"index-{name}.faiss"
    check_outputs({"--output": output, "--output's record": output.with_suffix(".json")}, {},
                  shards={"SHARDS": positionals.shards})
    if output.exists():
        raise ValueError(f"{output} exists: delete it or give another --output")
    built = build_faiss_index(shards, options.faiss, output, similarity=options.similarity,
                              train_size=options.train_size, seed=options.seed, use_gpu=False if options.cpu else None)
    print(f"{options.faiss} index of {shards.count} embeddings in {built}")
    return 0


# ------------------------------------------------------------------------------------------------ search

SEARCH_EXAMPLES = """\
examples:
  # exact search streamed over the shards (memory: the queries, one shard and the top-k lists)
  dense-encoders search emb/msmarco emb/msmarco-dev-queries --k 1000 --output runs/dev.trec

  # a FAISS index; the queries may also be a text file, encoded with the corpus's model
  dense-encoders search emb/msmarco/index-IVF65536-PQ64.faiss queries.dev.small.tsv --nprobe 64 --output runs/dev.trec
"""


def build_search_parser():
    from ..settings.corpus import SearchSettings

    parser = make_parser(
        "dense-encoders search",
        "Top-k search of queries over a corpus's embedding shards (exact, streamed) or its FAISS index; writes a "
        "TREC run.",
        SEARCH_EXAMPLES,
        (SearchSettings,),
    )
    parser.add_argument("corpus", help="Embedding shards (a folder from `encode`) or a .faiss index from `index`.")
    parser.add_argument("queries", help="Query shards (`encode --queries`), or a queries file (BEIR folder, .jsonl, "
                        ".tsv, .txt) encoded with the corpus's model.")
    return parser


def search(argv: list[str]) -> int:
    # slow to import (sentence_transformers via evaluation, torch): only when the command runs
    from ..data.embedding_shards import EmbeddingShards
    from ..data.runs import write_ranked_trec_run
    from ..evaluation.backends import stored_index_backend
    from ..evaluation.shard_search import ranked_from_topk, search_shards

    options, positionals = parse(build_search_parser(), argv)
    check_device(options.device)
    check_outputs({"--output": options.output}, {},
                  shards={"CORPUS": positionals.corpus, "QUERIES": positionals.queries})
    corpus = Path(positionals.corpus)
    # a stored index: its record names the backend that searches it; a folder: embedding shards, searched exactly
    backend = stored_index_backend(corpus)
    if backend is not None:
        stored, record, documents = backend.open_index(corpus)
    else:
        documents = EmbeddingShards.open(corpus)
    query_ids, query_embeddings = _queries_for(documents, positionals.queries, options)
    if backend is not None:
        scores, indices = backend.search_index(stored, record, query_embeddings, options.k, nprobe=options.nprobe,
                                               ef_search=options.ef_search)
    else:
        if options.nprobe or options.ef_search:
            raise ValueError("--nprobe / --ef-search apply to a FAISS index, not to exact search over shards")
        scores, indices = search_shards(query_embeddings, documents, options.k, similarity=options.similarity,
                                        device=options.device or "cpu", show_progress_bar=not options.no_progress)
    _refuse_non_finite_scores(query_ids, documents, scores, indices)
    ranked = ranked_from_topk(query_ids, documents, scores, indices)
    write_ranked_trec_run(ranked, options.output, tag=options.tag)
    print(_written(ranked, options.k, documents.count, options.output), file=sys.stderr)
    return 0


def _refuse_non_finite_scores(query_ids: list[str], documents, scores, indices) -> None:
    """A one-line ``ValueError`` when a score found is NaN or infinite (vectors holding them, which shards written
    before every writer refused them can hold): no run gets a score that is not a number."""
    import numpy as np

    scores, indices = np.asarray(scores), np.asarray(indices)
    bad = np.argwhere((indices >= 0) & ~np.isfinite(scores))
    if len(bad):
        row, column = (int(value) for value in bad[0])
        (document,) = documents.ids_at([indices[row, column]])
        raise ValueError(f"query {query_ids[row]!r} scores document {document!r} as {scores[row, column]}: the vectors "
                         f"of {documents.folder} or of the queries hold NaN or infinite values ({len(bad)} such scores "
                         "in the top-k); nothing was written: encode them again")


def _written(ranked, k: int, count: int, output) -> str:
    """What ``search`` wrote (a :class:`~dense_encoders.data.runs.RankedRun`): the documents per query as they are
    in the run, and why fewer than ``--k``."""
    lengths = sorted(set(ranked.counts.tolist())) or [0]
    top = str(lengths[0]) if len(lengths) == 1 else f"{lengths[0]} to {lengths[-1]}"
    why = ""
    if lengths[-1] < k:
        why = f" (--k {k}: the corpus holds {count})" if count < k else f" (--k {k}: the index returned fewer)"
    return f"Wrote the top {top} documents of {len(ranked.query_ids)} queries over {count} documents to {output}{why}"


def _queries_for(documents, queries: str, options):
    """Query ids and embeddings: from query shards (same model checked), or encoded here with the corpus's model."""
    # slow to import (sentence_transformers via evaluation, torch): only when the command runs
    from ..data.embedding_shards import iterate_texts, text_source
    from ..evaluation.shard_search import check_compatible, load_query_embeddings

    queries = Path(queries)
    if queries.is_dir() and (queries / "manifest.json").is_file():
        query_ids, embeddings, shards = load_query_embeddings(queries)
        check_compatible(shards, documents)
        return query_ids, embeddings
    settings = documents.settings
    model = settings["model"]
    check_model(model, "the corpus's model")
    from ..evaluation.encoding import RetrievalEncoder
    from . import register_model_families

    register_model_families()  # the one case of search that loads a model
    encoder = RetrievalEncoder(model, pooling=settings.get("pooling"), device=options.device,
                               batch_size=options.batch_size,
                               normalize=settings["normalize"], show_progress_bar=not options.no_progress,
                               document_prompt=settings["prompt"], document_max_length=settings["max_length"],
                               trust_remote_code=options.trust_remote_code, runtime=options.runtime)
    if encoder.fingerprint != settings["fingerprint"]:
        raise ValueError(f"{model} has other weights than the model that encoded {documents.folder}: encode the "
                         "queries with `dense-encoders encode --queries` from that model")
    pairs = list(iterate_texts(text_source(queries, "query")))
    if not pairs:
        raise ValueError(f"{queries} holds no queries")
    return [identifier for identifier, _ in pairs], encoder.encode_queries([text for _, text in pairs]).embeddings


__all__ = ["build_encode_parser", "build_index_parser", "build_search_parser", "encode", "index", "search"]
