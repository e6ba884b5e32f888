"""`dense_encoders.benchmarking` and `dense-encoders bench`: the FLOP bound against hand-computed
multiply-adds, the efficiency report on tiny models and workloads, the PNG, the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig

from dense_encoders.benchmarking import (
    QUICK_SETTINGS,
    bert_base_config,
    bert_macs,
    default_presets,
    document_lengths,
    efficiency_report,
    format_report,
    infused_macs,
    layer_macs,
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
        "Condenser (CondenserModel)",
        *TINY_PRESETS,
        "DE-2 source (4-layer BERT 4x32 cross-encoder)",
        "DE-2 (from a 4-layer BERT 4x32 cross-encoder)",
    ]
    assert [row["model"] for row in report["rows"]] == expected
    assert [row["kind"] for row in report["rows"]] == ["baseline", "condenser", "tite", "tite", "source", "infused"]
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
    assert "### queries" in text and "### documents" in text
    assert "| model" in text and "vs BERT" in text and "FLOP bound" in text and "bound vs padded BERT" in text
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
    assert [row["model"] for row in written["rows"]][2] == "tiny-tite-2-late"
    assert written["workloads"]["queries"]["stats"]["texts"] == 4


def test_cli_bench_errors(capsys):
    assert main(["bench", "--device", "cpu", "--attn", "flash_attention_2", "--no-plot"]) == 2
    assert "flash_attention_2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--quick", "--presets", "minilm-l6-3-all"])


def test_cli_lists_bench(capsys):
    assert main(["--help"]) == 0
    assert "bench" in capsys.readouterr().out
