"""How exact search grows with the corpus: the ``search`` command against faiss at several corpus sizes, time and
peak memory, each side in a fresh process.

For each size of ``--docs`` (100,000 / 300,000 / 1,000,000), ``--queries`` (1,000) random unit queries and a corpus
of random unit vectors of ``--dim`` (384), seeded, written by our writer (``save_embedding_shards``) as
``--dtype`` (float16: per-row scales) shards of ``--shard-size`` (100,000) rows, and for the faiss user the values
the shards hold, decoded to float32, as a ``.npy`` matrix (peers.py's ``SearchData``). Two sides, alternated over
``--rounds`` rounds after ``--warmup`` untimed calls each (:func:`dense_encoders.benchmarking.alternating_rounds`):

ours
    ``dense-encoders search CORPUS_SHARDS QUERY_SHARDS --k K --output RUN --no-progress``: the whole command as a
    user runs it (the console script beside this interpreter, else ``python -m dense_encoders.cli``), the same
    ``dense_encoders`` this script imports.
faiss + a plain TREC writer
    the script a faiss user writes (peers.py's search-command row, in a file of its own): ``np.load`` the matrix and
    the queries, read the ids, ``IndexFlatIP`` ``add`` + ``search``, write the TREC run line by line. It reports
    the CPU and wall seconds of its three stages (loading, the index, writing), shown under the table.

Each call is a fresh process, forked by a small launcher (not by this script: a child's ``ru_maxrss`` includes the
pages of the process it was forked from, until it execs): its process CPU time (user + system, every thread), its
peak resident set size (``ru_maxrss``) and its wall time come from the launcher's ``os.wait4`` of that process
alone. Both children run with
``OMP_NUM_THREADS`` = ``--threads`` (default: torch's thread count here), so torch, numpy's BLAS and faiss use the
same number of threads. Checked: the two run files hold the same documents with the same scores per query, up to
ties within float rounding at the k-th place (peers.py's ``compare_runs``).

Other jobs
    As in peers.py: every call records the share of the cores' CPU time other processes used during it (and
    Linux PSI's ``some`` pressure beside it); rounds in which a call ran beside others using more than
    ``OTHERS_LOAD`` (10 %) are left out of the seconds and ratios unless ``--allow-load``; a size with no other
    round prints "withheld". Peak RSS is the largest of every round (memory does not depend on the load).

Our memory bound
    ``search`` holds the queries, one shard at a time, one block of scores and the top-k, then looks the ids of the
    results up (src/dense_encoders/evaluation/backends/exact.py ``search_shards``, backends/core.py
    ``RunningTopK``, data/embedding_shards.py ``EmbeddingShards.shards``, evaluation/shard_search.py
    ``ranked_from_topk``). With Q queries, N documents, k = min(k, N), dimension d, S rows in the largest shard,
    blocks of qc x dc = min(query_chunk_size, Q) x min(document_chunk_size, N) scores (search_shards' defaults,
    1024 x 16384) and ASCII ids of at most L characters, in bytes (:func:`memory_bound`)::

        bound   = baseline + queries + 16 MB + max(search, ids)
        queries = 2 Q d 4                          the query shards' rows and their concatenation
        search  = S d (4 + h) + S 4 [float16]      one shard: its file's rows (h = 2 for float16, with the scales;
                                                   0 for float32, whose rows are the file's bytes) decoded to float32
                  + S (64 + L)                     its ids list
                  + dc d 4                         one block of it normalized (cosine)
                  + 2 qc dc 4                      two score blocks (one multiplied while the other is selected)
                  + Q k (4 + 8)                    the top-k (faiss's heaps)
        ids     = Q k R + min(Q k, N) (D + L)      the run being made: R = 100 bytes per result, D = 250 per
                  + S (64 + L)                     distinct document (Python objects); one shard's ids at a time

    baseline is measured: the peak RSS of the same command over a one-document corpus, one query, k = 1 (the
    interpreter, torch, numpy, faiss and the command's other imports); 16 MB covers what is not itemized (the
    BLAS's packing buffers, the manifest, file and hash buffers, the allocator's rounding). One shard is counted:
    the search lets go of a shard before the next is read. Nothing in the bound grows with N except min(Q k, N),
    which stops at Q k: it is set by the shard and block sizes and by
    Q x k. faiss's peak, by contrast, holds the whole matrix twice (``np.load`` and the index's copy): about
    2 N d 4 bytes above its baseline.

Usage (repository root)::

    python benchmarks/search_scaling.py                                  # 100,000 / 300,000 / 1,000,000, 2 rounds
    python benchmarks/search_scaling.py --docs 100000 300000 --rounds 3 --json scaling.json
    python benchmarks/search_scaling.py --docs 2000 5000 --queries 20 --k 10 --shard-size 1000 --warmup 0

CPU only. The defaults took 2.7 minutes on 2 idle cores (4.5-6 minutes shared with other jobs), writing the
data included: the 1,000,000 vectors' shards and matrix take about 2.3 GB on disk in a temporary folder, and the
parent holds up to about 5 GB while it writes them (it frees them before the timed calls).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _report import command_line, device_name, render_table, run_script

try:  # allow running from a checkout without `pip install -e .`
    import dense_encoders
except ImportError:  # pragma: no cover - depends on how the script is launched
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import dense_encoders

from peers import (
    OURS,
    SearchData,
    check_line,
    compare_runs,
    percents,
    pressure_footnote,
    ratios,
    rounds_used,
    say,
    summarized,
)

from dense_encoders.benchmarking import (
    OTHERS_LOAD,
    SelfTimed,
    alternating_rounds,
    cpu_pressure,
    cpu_stall,
    load_snapshot,
    others_load_during,
    pressure_during,
)
from dense_encoders.data.embedding_shards import save_embedding_shards

FAISS = "faiss + a plain TREC writer"
DTYPES = ("float32", "float16")
# the ids lookup's bytes per result of the top-k (R) and per distinct document among them (D, plus its id's length),
# counted from CPython's object sizes (64-bit), rounded up: see memory_bound
RESULT_BYTES = 100
DOC_BYTES = 250
# what the bound does not itemize: the BLAS's packing buffers, the manifest, file and hash buffers, the allocator's
# rounding (the itemized terms alone came within 1 MB of the measured peak: 100,000-row float16 shards, 1,000 queries,
# k = 1000)
UNITEMIZED = 16_000_000
MB = 1e6
# the terms of memory_bound's search phase, in the order the report lists them
SEARCH_TERMS = ("shard", "shard_ids", "normalized_block", "score_blocks", "top_k")

# the faiss user's script, run as a file of its own: argv = matrix.npy queries.npy doc_ids.txt query_ids.txt k run
FAISS_SCRIPT = '''\
import json, sys, time

import faiss
import numpy as np


def clocks():
    return time.process_time(), time.perf_counter()


matrix_file, queries_file, doc_ids_file, query_ids_file, k, run = sys.argv[1:]
k = int(k)
stages, start = {}, clocks()
matrix, queries = np.load(matrix_file), np.load(queries_file)
with open(doc_ids_file) as handle:
    doc_ids = handle.read().split()
with open(query_ids_file) as handle:
    query_ids = handle.read().split()
stages["load"], start = [now - then for now, then in zip(clocks(), start)], clocks()
index = faiss.IndexFlatIP(matrix.shape[1])
index.add(matrix)
scores, indices = index.search(queries, k)
stages["index"], start = [now - then for now, then in zip(clocks(), start)], clocks()
with open(run, "w") as handle:
    for query_id, row_scores, row_indices in zip(query_ids, scores, indices):
        for rank, (score, index_) in enumerate(zip(row_scores, row_indices), start=1):
            handle.write(f"{query_id} Q0 {doc_ids[index_]} {rank} {score:.6f} faiss\\n")
stages["write"] = [now - then for now, then in zip(clocks(), start)]
print(json.dumps(stages))
'''


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The search command against faiss IndexFlatIP + a plain TREC writer at several corpus sizes, "
        "each call in a fresh process: process CPU and wall time, peak RSS, and our memory bound.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--docs", type=int, nargs="+", default=[100_000, 300_000, 1_000_000],
                        help="Corpus sizes of the sweep.")
    parser.add_argument("--queries", type=int, default=1000, help="Query vectors.")
    parser.add_argument("--dim", type=int, default=384, help="Vector dimension.")
    parser.add_argument("--k", type=int, default=1000, help="Results per query.")
    parser.add_argument("--shard-size", type=int, default=100_000, help="Rows per corpus shard.")
    parser.add_argument("--dtype", choices=DTYPES, default="float16", help="Precision of the corpus shards.")
    parser.add_argument("--rounds", type=int, default=2, help="Timed rounds per size (min and median reported).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed calls of every side before the rounds.")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS of both sides' processes (default: torch's thread count here).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the vectors.")
    parser.add_argument("--allow-load", action="store_true",
                        help=f"Draw seconds and ratios from every round, also those in which a call ran beside "
                             f"other processes using more than {OTHERS_LOAD:.0f} %% of the cores' CPU time.")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="Also write the results as JSON.")
    args = parser.parse_args(argv)
    for name in ("queries", "dim", "k", "shard_size", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(size < 1 for size in args.docs):
        parser.error("--docs: every size must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    args.docs = sorted(dict.fromkeys(args.docs))
    return args


# ------------------------------------------------------------------------------------------
# one fresh process
# ------------------------------------------------------------------------------------------


def child_env(threads: int) -> dict[str, str]:
    """This environment, the ``dense_encoders`` this script imports first on the path, ``threads`` OpenMP threads
    and no GPU."""
    source = str(Path(dense_encoders.__file__).resolve().parents[1])
    path = os.pathsep.join([source, *filter(None, [os.environ.get("PYTHONPATH")])])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")


def command_prefix() -> list[str]:
    """How a user runs ``dense-encoders``: the console script installed beside this interpreter, else
    ``python -m dense_encoders.cli``."""
    script = Path(sys.executable).parent / "dense-encoders"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "dense_encoders.cli"]


# A child's ru_maxrss counts the pages of the process it was forked from until it execs (Linux carries the old memory
# map's high-water mark into the process's maxrss at exec), and Python spawns by vfork: a side started from this
# process, which holds torch and, while it writes them, gigabytes of vectors, would report this process's peak. So
# each side is started by this small launcher, which forks, execs the side and reports its wait4 usage as JSON.
LAUNCHER = """\
import json, os, sys, time

report, argv = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - started
with open(report, "w") as handle:
    json.dump({"code": os.waitstatus_to_exitcode(status), "wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
               "maxrss": usage.ru_maxrss}, handle)
"""


def run_child(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """``(process CPU seconds, wall seconds, peak RSS in bytes, stdout)`` of ``argv`` (an executable's full path
    first) run in a fresh process, started by :data:`LAUNCHER`: CPU time and peak RSS from ``os.wait4`` of that
    process alone (``ru_utime + ru_stime``, ``ru_maxrss``), wall time from its fork to its end."""
    with tempfile.TemporaryDirectory(prefix="child_") as folder:
        report, out, err = (Path(folder) / name for name in ("report.json", "stdout", "stderr"))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            subprocess.run([sys.executable, "-c", LAUNCHER, str(report), *argv], stdout=stdout, stderr=stderr,
                           env=env, check=True)
        usage = json.loads(report.read_text())
        if usage["code"] != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} ... exited with {usage['code']}: {err.read_text()[-2000:]}")
        peak = usage["maxrss"] * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
        return usage["cpu"], usage["wall"], peak, out.read_text()


class Side:
    """One side of a size: a call is a fresh process; every call's peak RSS (and stdout) kept in order."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.argv, self.env = argv, env
        self.peaks: list[int] = []
        self.outputs: list[str] = []

    def __call__(self) -> SelfTimed:
        cpu, wall, peak, output = run_child(self.argv, self.env)
        self.peaks.append(peak)
        self.outputs.append(output)
        return SelfTimed(cpu, wall, peak)


# ------------------------------------------------------------------------------------------
# the memory bound
# ------------------------------------------------------------------------------------------


def block_sizes() -> tuple[int, int]:
    """``(query_chunk_size, document_chunk_size)`` that ``search`` runs with: ``search_shards``' defaults."""
    from dense_encoders.evaluation.shard_search import search_shards

    parameters = inspect.signature(search_shards).parameters
    return parameters["query_chunk_size"].default, parameters["document_chunk_size"].default


def memory_bound(*, baseline: int, queries: int, docs: int, dim: int, k: int, shard_rows: int, dtype: str,
                 query_chunk: int, document_chunk: int, id_length: int) -> dict[str, int]:
    """Our peak RSS bound in bytes, by term (module docstring): ``baseline + queries + UNITEMIZED + max(search,
    ids)``, ``search = shard + shard_ids + normalized_block + score_blocks + top_k``.

    shard: the one shard in memory, its file's rows and scales and those rows decoded to float32 (``S d (2 + 4) +
    S 4`` for float16; ``S d 4`` for float32, whose rows are views of the file's bytes); shard_ids: its ids list
    (``S (8 + 56 + L)``: a list slot and an ASCII str of 49 + L bytes, rounded up to 8); normalized_block: one
    block of the shard normalized for cosine similarity, ``min(dc, N) d 4``; score_blocks: the two blocks of
    scores, ``2 min(qc, Q) min(dc, N) 4`` (one is multiplied while the other is selected); top_k: the running
    top-k in faiss's heaps, ``Q k (4 + 8)``. ids: per result of the top-k ``RESULT_BYTES`` (its score and index,
    12; the lookup's temporary object and index arrays, about 33; the run's two list slots and its score as a
    Python float, 40); per distinct document among the results, at most ``min(Q k, N)``, ``DOC_BYTES`` plus its
    id's length (the id as a Python str, 56 + L; its position as Python ints in a list and in a dict with their
    slots, about 125; the object array and the sorted positions, 16); one shard's ids list at a time."""
    k = min(k, docs)
    half = dtype == "float16"
    id_bytes = 8 + 56 + id_length
    terms = {
        "baseline": baseline,
        "queries": 2 * queries * dim * 4,
        "unitemized": UNITEMIZED,
        "shard": shard_rows * dim * ((2 + 4) if half else 4) + (shard_rows * 4 if half else 0),
        "shard_ids": shard_rows * id_bytes,
        "normalized_block": min(document_chunk, docs) * dim * 4,
        "score_blocks": 2 * min(query_chunk, queries) * min(document_chunk, docs) * 4,
        "top_k": queries * k * (4 + 8),
        "ids": queries * k * RESULT_BYTES + min(queries * k, docs) * (DOC_BYTES + id_length) + shard_rows * id_bytes,
    }
    terms["search"] = sum(terms[name] for name in SEARCH_TERMS)
    terms["bound"] = terms["baseline"] + terms["queries"] + terms["unitemized"] + max(terms["search"], terms["ids"])
    return terms


def measure_baseline(folder: Path, dim: int, env: dict[str, str]) -> dict[str, float]:
    """``{"cpu", "wall", "peak_rss"}`` of ``search`` over one document and one query, k = 1, in a fresh process:
    the command's fixed cost (the interpreter and its imports), the bound's baseline."""
    vectors = np.eye(1, dim, dtype=np.float32)
    corpus, queries = folder / "baseline-corpus", folder / "baseline-queries"
    save_embedding_shards(corpus, vectors, ["d0"])
    save_embedding_shards(queries, vectors, ["q0"], settings={"side": "query"})
    argv = [*command_prefix(), "search", str(corpus), str(queries), "--k", "1", "--output",
            str(folder / "baseline.trec"), "--no-progress"]
    stall, started, snapshot = cpu_stall(), time.perf_counter(), load_snapshot()
    cpu, wall, peak, _ = run_child(argv, env)
    return {"cpu": cpu, "wall": wall, "peak_rss": peak, "pressure": pressure_during(stall, started),
            "others": others_load_during(snapshot)}


# ------------------------------------------------------------------------------------------
# a size
# ------------------------------------------------------------------------------------------


def size_row(args: argparse.Namespace, docs: int, folder: Path, env: dict[str, str], faiss_script: Path,
             baseline: int) -> dict:
    shards = -(-docs // args.shard_size)
    k = min(args.k, docs)
    say(f"{docs:,} documents: writing {shards} {args.dtype} shards and the float32 matrix")
    data = SearchData(argparse.Namespace(seed=args.seed, docs=docs, queries=args.queries, dim=args.dim,
                                         shards=shards), folder)
    corpus, _ = data.corpus(args.dtype)
    shard_rows = data.shard_size
    id_length = max(len(identifier) for identifier in data.doc_ids)
    data.documents = data.queries = data.doc_ids = None  # the children read the files; free the parent's copies
    data.matrices.clear()
    ours_run, their_run = folder / "ours.trec", folder / "faiss.trec"
    ours = Side([*command_prefix(), "search", str(corpus), str(data.query_shards), "--k", str(k), "--output",
                 str(ours_run), "--no-progress"], env)
    theirs = Side([sys.executable, str(faiss_script), str(folder / f"corpus-{args.dtype}.npy"),
                   str(folder / "queries.npy"), str(folder / "doc_ids.txt"), str(folder / "query_ids.txt"), str(k),
                   str(their_run)], env)
    say(f"{docs:,} documents: {args.queries:,} queries, k={k}, {shards} shards of {shard_rows:,}")
    measured = alternating_rounds({OURS: ours, FAISS: theirs}, args.rounds, warmup=args.warmup, say=say)
    sides = summarized(measured, args.allow_load)
    for side, name in ((ours, OURS), (theirs, FAISS)):
        sides[name]["peak_rss_rounds"] = side.peaks[-args.rounds:]  # the warm-up calls came first
        sides[name]["peak_rss"] = max(sides[name]["peak_rss_rounds"])
    stages = [json.loads(output) for output in theirs.outputs[-args.rounds:]]
    query_chunk, document_chunk = block_sizes()
    bound = memory_bound(baseline=baseline, queries=args.queries, docs=docs, dim=args.dim, k=k,
                         shard_rows=shard_rows, dtype=args.dtype, query_chunk=query_chunk,
                         document_chunk=document_chunk, id_length=id_length)
    return {
        "docs": docs, "queries": args.queries, "dim": args.dim, "k": k, "dtype": args.dtype, "shards": shards,
        "shard_rows": shard_rows, "id_length": id_length, "query_chunk_size": query_chunk,
        "document_chunk_size": document_chunk, "sides": sides, "ratios": ratios(sides),
        "checks": {FAISS: {"what": "the same run file up to ties at the k-th place",
                           **compare_runs(ours_run, their_run)}},
        "bound": bound, "within_bound": sides[OURS]["peak_rss"] <= bound["bound"],
        "faiss_stages": {stage: {"cpu": [round_[stage][0] for round_ in stages],
                                 "wall": [round_[stage][1] for round_ in stages]} for stage in stages[0]},
    }


def run(args: argparse.Namespace) -> dict:
    try:
        import faiss  # noqa: F401
    except ImportError:
        raise SystemExit("search_scaling.py: the faiss side needs faiss (pip install faiss-cpu)") from None
    threads = args.threads or torch.get_num_threads()
    env = child_env(threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="search_scaling_") as scratch:
        scratch = Path(scratch)
        faiss_script = scratch / "faiss_search.py"
        faiss_script.write_text(FAISS_SCRIPT)
        say("baseline: the search command over one document")
        baseline = measure_baseline(scratch, args.dim, env)
        for docs in args.docs:
            folder = scratch / f"docs-{docs}"
            rows.append(size_row(args, docs, folder, env, faiss_script, baseline["peak_rss"]))
            shutil.rmtree(folder)  # the next size's data in its place
    return {
        "device": device_name(torch.device("cpu")), "threads": threads, "rounds": args.rounds,
        "warmup": args.warmup, "torch": torch.__version__, "cpu_pressure_after": cpu_pressure(),
        "others_load": OTHERS_LOAD, "allow_load": args.allow_load, "baseline": baseline,
        "baseline_rss": baseline["peak_rss"],
        "command": command_line(), "rows": rows,
    }


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _side_cell(side: dict) -> str:
    """"CPU s / wall s / peak RSS MB": median seconds over the rounds used, the largest peak over every round."""
    seconds = ("withheld / withheld" if side["cpu"] is None else
               f"{side['cpu']['median']:.2f} / {side['wall']['median']:.2f}")
    return f"{seconds} / {side['peak_rss'] / MB:,.0f}"


def format_report(results: dict) -> str:
    lines = [f"# How exact search grows with the corpus ({results['device']}, {results['threads']} threads, "
             f"{results['rounds']} rounds after {results['warmup']} warm-up, alternated, each call a fresh process)",
             ""]
    header = ["docs", "ours: CPU s / wall s / peak RSS MB", f"{FAISS}: CPU s / wall s / peak RSS MB",
              "ratio faiss/ours CPU / wall", "our bound MB", "same results", "rounds used"]
    body, withheld = [], False
    for row in results["rows"]:
        ratio = row["ratios"][FAISS]
        withheld |= ratio is None
        body.append([
            f"{row['docs']:,}", _side_cell(row["sides"][OURS]), _side_cell(row["sides"][FAISS]),
            "withheld" if ratio is None else f"{ratio['cpu_median']:.2f} / {ratio['wall_median']:.2f}",
            f"{row['bound']['bound'] / MB:,.0f}", "yes" if row["checks"][FAISS]["same"] else "NO",
            rounds_used(row["sides"][OURS], results["others_load"])])
    lines += ["seconds: median over the rounds used; peak RSS: the largest of every round; ratio = faiss's time / "
              "ours (higher = ours faster); MB = 10^6 bytes", *render_table(header, body), ""]
    first = results["rows"][0] if results["rows"] else None
    if first is not None:
        lines.append(f"{first['queries']:,} queries x {first['dim']} dimensions, k={first['k']}, {first['dtype']} "
                     f"shards of {first['shard_rows']:,} rows (the last one smaller), blocks of "
                     f"{first['query_chunk_size']} x {first['document_chunk_size']} scores")
    fixed = results["baseline"]
    lines.append(f"the command's fixed cost, over one document (one query, k = 1): {fixed['cpu']:.2f} s CPU / "
                 f"{fixed['wall']:.2f} s wall / {fixed['peak_rss'] / MB:,.0f} MB peak RSS (the interpreter and its "
                 f"imports; others' load {percents([fixed.get('others')])} %, CPU pressure "
                 f"{percents([fixed['pressure']])} %)")
    lines.append(f"our memory bound = baseline {results['baseline_rss'] / MB:,.0f} MB (the command over one "
                 f"document) + queries + unitemized {UNITEMIZED / MB:.0f} + max(search: one shard's rows, read and "
                 "decoded, + its ids + a normalized block + two score blocks + the top-k; ids: "
                 f"{RESULT_BYTES} B per result + {DOC_BYTES} B + id length per distinct document + one shard's ids), "
                 "in MB:")
    for row in results["rows"]:
        bound, peak = row["bound"], row["sides"][OURS]["peak_rss"]
        terms = ", ".join(f"{name} {bound[name] / MB:,.1f}" for name in
                          ("queries", *SEARCH_TERMS, "search", "ids"))
        lines.append(f"  {row['docs']:,}: {terms}; bound {bound['bound'] / MB:,.0f}; measured {peak / MB:,.0f} "
                     f"({peak / bound['bound']:.2f} of it): {'within' if row['within_bound'] else 'ABOVE'}")
    for row in results["rows"]:
        parts = [f"{stage} {np.median(values['cpu']):.2f} s CPU / {np.median(values['wall']):.2f} s wall"
                 for stage, values in row["faiss_stages"].items()]
        check = row["checks"][FAISS]
        ours, faiss = row["sides"][OURS], row["sides"][FAISS]
        lines += [f"{row['docs']:,} documents, {row['shards']} shards:",
                  f"  faiss script by stage (medians): {'; '.join(parts)}",
                  f"  {check_line(f'ours vs {FAISS}', check)}",
                  f"  others' load per round (%): ours {percents(ours['others'])}; faiss {percents(faiss['others'])}; "
                  f"CPU pressure per round (%): ours {percents(ours['pressure'])}; faiss {percents(faiss['pressure'])}"]
    lines += pressure_footnote(results, withheld, "size")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    return run_script(argv, parse_args, run, format_report)


if __name__ == "__main__":
    main()
