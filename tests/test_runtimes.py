"""``--runtime openvino`` / ``onnxruntime``: the transformer of every family, exported once to ONNX, gives torch's
vectors; the export is cached (in $DENSE_ENCODERS_CACHE, which conftest points into the session's scratch
folder) and reused; the shards record the runtime and are continued only in it; a missing
package, a GPU or a multi-device pool is one line (dense_encoders.evaluation.runtimes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_condenser_config

import dense_encoders
from dense_encoders import CondenserModel, TiteModel
from dense_encoders.cli import main as cli_main
from dense_encoders.data.embedding_shards import EmbeddingShards
from dense_encoders.evaluation import runtimes
from dense_encoders.evaluation.corpus_encoding import encode_corpus
from dense_encoders.evaluation.encoding import RetrievalEncoder
from dense_encoders.models.infused import InfusedDualEncoderConfig, InfusedDualEncoderModel
from dense_encoders.models.tite.presets import tite_preset

RUNTIMES = [pytest.param(name, marks=pytest.mark.skipif(
    not all(runtimes._installed(module) for module in runtimes.RUNTIME_PACKAGES[name][0]),
    reason=f"{name} is not installed: pip install -e '.[test]'")) for name in runtimes.RUNTIME_PACKAGES]
NEEDS_OPENVINO = pytest.mark.skipif(not runtimes._installed("openvino"),
                                    reason="openvino is not installed: pip install -e '.[test]'")
# texts of many lengths in batches of 2: full, padded and single-row batches all go through the graph
TEXTS = [
    "dense retrieval",
    "a token independent text encoder pools every text down to one vector inside its layers, so it is fast",
    "what",
    "how does a river cross a mountain and where does it go then",
    "protein enzyme music bridge",
]
# float32 vectors of LayerNorm'd states (a few units) through two kernel libraries: their sums round in other
# orders, a few ulps per layer (observed below 1e-6); the bound
ATOL = 1e-5


def tiny_infused(vocab_size: int, **overrides) -> InfusedDualEncoderModel:
    return InfusedDualEncoderModel(InfusedDualEncoderConfig(**{
        "vocab_size": vocab_size, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
        "max_position_embeddings": 64, "num_copied_layers": 1, "num_new_layers": 1, **overrides}))


FAMILIES = {
    "condenser": lambda v: CondenserModel(tiny_condenser_config(vocab_size=v)),
    "tite-late": lambda v: TiteModel(tite_preset("tiny-tite-2-late", vocab_size=v)),
    "tite-staggered": lambda v: TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=v)),
    "infused-mean": lambda v: tiny_infused(v),
    "infused-cls": lambda v: tiny_infused(v, pooling="cls"),
}


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory, tok):
    folders = {}
    for name, build in FAMILIES.items():
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(name)
        build(len(tok)).eval().save_pretrained(folder)
        tok.save_pretrained(folder)
        folders[name] = folder
    return folders


def _vectors(model, runtime: str, **options) -> np.ndarray:
    encoder = RetrievalEncoder(model, runtime=runtime, batch_size=2, show_progress_bar=False, **options)
    return encoder.encode_documents(TEXTS).embeddings


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_gives_torchs_vectors(family, runtime, family_folders):
    folder = family_folders[family]
    expected = _vectors(folder, "torch", device="cpu")
    got = _vectors(folder, runtime)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
    assert np.abs(expected).max() > 0.1  # vectors, not zeros that agree trivially


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_sentence_transformers_checkpoint_and_a_plain_bert_give_torchs_vectors(runtime, minilm_path,
                                                                              tmp_path):
    np.testing.assert_allclose(_vectors(minilm_path, runtime), _vectors(minilm_path, "torch", device="cpu"),
                               rtol=0, atol=ATOL)
    # the bare transformers checkpoint under it, with the pooling given: its own export
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(minilm_path), device="cpu")[0].model.save_pretrained(tmp_path / "bert")
    SentenceTransformer(str(minilm_path), device="cpu").tokenizer.save_pretrained(tmp_path / "bert")
    np.testing.assert_allclose(_vectors(tmp_path / "bert", runtime, pooling="mean"),
                               _vectors(tmp_path / "bert", "torch", pooling="mean", device="cpu"), rtol=0, atol=ATOL)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_export_is_made_once_and_a_damaged_one_again(runtime, family_folders, monkeypatch):
    folder = family_folders["condenser"]
    encoder = RetrievalEncoder(folder, runtime=runtime, show_progress_bar=False)  # exported (or already there)
    graph = runtimes.exported_graph(encoder.model, runtimes.transformer_module(encoder.model), encoder.fingerprint,
                                    runtime)
    exports = []
    real_export = runtimes._export
    monkeypatch.setattr(runtimes, "_export", lambda *a, **k: exports.append(1) or real_export(*a, **k))
    expected = _vectors(folder, "torch", device="cpu")
    np.testing.assert_allclose(_vectors(folder, runtime), expected, rtol=0, atol=ATOL)
    assert exports == []  # read from the cache
    with open(graph.path, "ab") as handle:  # a cut or grown file: another size than the record says
        handle.write(b"\0")
    np.testing.assert_allclose(_vectors(folder, runtime), expected, rtol=0, atol=ATOL)
    assert exports == [1]


def _dead_pid() -> int:
    """The PID of a process that has ended (its number is not reused this soon)."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_damaged_export_is_verified_and_made_again(runtime, family_folders, tmp_path, caplog):
    """Real damage to the cached export, each healed with one line and torch's vectors. Before: weights overwritten
    in place (the same size) gave NaN vectors in shards with exit 0; a listed file replaced by a link out of the
    folder failed in ONNX Runtime ("External data path escapes model directory") on every later run; the folder
    replaced by a link gave "[Errno 20] Not a directory"; a killed export's scratch folder stayed for good."""
    import socket

    folder = family_folders["infused-cls"]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    expected = _vectors(folder, "torch", device="cpu")
    encoder = RetrievalEncoder(folder, runtime=runtime, show_progress_bar=False)  # exported (or already there)
    graph = runtimes.exported_graph(encoder.model, runtimes.transformer_module(encoder.model), encoder.fingerprint,
                                    runtime)
    export = graph.path.parent
    stale = export.parent / f".export-{_dead_pid()}@{socket.gethostname()}-abcdefgh"
    stale.mkdir()
    largest = max((path for path in export.iterdir() if path.name != "export.json"), key=lambda p: p.stat().st_size)
    size = largest.stat().st_size
    with open(largest, "r+b") as handle:  # weights overwritten in place: the same size, NaN bit patterns
        handle.seek(size // 2)
        handle.write(b"\xff" * 256)
    assert largest.stat().st_size == size
    output = tmp_path / "shards"
    with caplog.at_level("WARNING", logger="dense_encoders.evaluation.runtimes"):
        assert cli_main(["encode", str(folder), str(texts), "--output", str(output), "--runtime", runtime,
                         "--batch-size", "2", "--dtype", "float32", "--no-progress"]) == 0
    assert [record.getMessage() for record in caplog.records] == [
        f"the cached {runtime} export in {export} is damaged ({largest.name} is not the file that was written (its "
        "SHA-256 differs)): exporting it again"]
    stored = next(EmbeddingShards.open(output).shards())[1]
    np.testing.assert_allclose(stored, expected, rtol=0, atol=ATOL)
    assert not stale.exists()  # left by a killed export: removed by the next one
    caplog.clear()

    outside = tmp_path / f"outside-{largest.name}"  # a listed file replaced by a link out of the folder
    outside.write_bytes(largest.read_bytes())
    largest.unlink()
    largest.symlink_to(outside)
    with caplog.at_level("WARNING", logger="dense_encoders.evaluation.runtimes"):
        np.testing.assert_allclose(_vectors(folder, runtime), expected, rtol=0, atol=ATOL)
    assert f"({largest.name} is missing, a link, or outside the folder)" in caplog.text
    assert not largest.is_symlink() and outside.read_bytes() == largest.read_bytes()
    caplog.clear()

    shutil.rmtree(export)  # the folder replaced by a link to a file
    (tmp_path / "a-file").write_text("not an export")
    export.symlink_to(tmp_path / "a-file")
    with caplog.at_level("WARNING", logger="dense_encoders.evaluation.runtimes"):
        np.testing.assert_allclose(_vectors(folder, runtime), expected, rtol=0, atol=ATOL)
    assert f"({export.name} is a link or a file, not a folder of exported files)" in caplog.text
    assert export.is_dir() and not export.is_symlink() and (tmp_path / "a-file").read_text() == "not an export"
    assert runtimes.export_problem(export, json.loads((export / "export.json").read_text())["key"]) is None


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_shards_record_the_runtime_and_are_continued_only_in_it(runtime, family_folders, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 3) + "\n")
    folder = family_folders["tite-late"]
    ours = encode_corpus(folder, texts, tmp_path / "ours", shard_size=4, dtype="float32", batch_size=2,
                         runtime=runtime, show_progress_bar=False)
    theirs = encode_corpus(folder, texts, tmp_path / "torch", shard_size=4, dtype="float32", batch_size=2,
                           device="cpu", show_progress_bar=False)
    manifest = json.loads((tmp_path / "ours" / "manifest.json").read_text())
    assert (manifest["settings"]["runtime"], manifest["settings"]["runtime_version"]) == (
        runtime, runtimes.runtime_version(runtime))
    np.testing.assert_allclose(np.concatenate([e for _, e, _ in ours.shards()]),
                               np.concatenate([e for _, e, _ in theirs.shards()]), rtol=0, atol=ATOL)
    # an unfinished torch run is not continued in another runtime: its shards would mix two runtimes
    (tmp_path / "torch" / "manifest.json").unlink()
    (tmp_path / "torch" / "shard-00001.safetensors").unlink()
    with pytest.raises(ValueError, match=f"runtime: torch -> {runtime}"):
        encode_corpus(folder, texts, tmp_path / "torch", shard_size=4, dtype="float32", batch_size=2,
                      runtime=runtime, show_progress_bar=False)


def test_a_folder_written_before_the_runtime_was_recorded_is_a_torch_run(family_folders, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 3) + "\n")
    folder = family_folders["condenser"]
    kwargs = dict(shard_size=4, dtype="float32", batch_size=2, device="cpu", show_progress_bar=False)
    first = encode_corpus(folder, texts, tmp_path / "old", **kwargs)
    expected = np.concatenate([e for _, e, _ in first.shards()])
    settings_file = tmp_path / "old" / "encoding.json"
    settings = json.loads(settings_file.read_text())
    del settings["runtime"], settings["runtime_version"]
    settings_file.write_text(json.dumps(settings))
    (tmp_path / "old" / "manifest.json").unlink()
    (tmp_path / "old" / "shard-00002.safetensors").unlink()
    again = encode_corpus(folder, texts, tmp_path / "old", **kwargs)
    np.testing.assert_array_equal(np.concatenate([e for _, e, _ in again.shards()]), expected)


def test_what_a_runtime_cannot_do_is_one_line(family_folders, monkeypatch, capsys, tmp_path):
    folder, texts = family_folders["condenser"], tmp_path / "t.txt"
    texts.write_text("one\ntwo\n")
    common = ["encode", str(folder), str(texts), "--output", str(tmp_path / "out")]
    assert cli_main([*common, "--runtime", "openvino", "--devices", "cpu", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--runtime openvino runs in this process on the CPU: leave --devices out" in err, err
    assert len(err.splitlines()) == 1
    # a GPU (the command line first refuses one this machine lacks, so asked here directly)
    with pytest.raises(ValueError, match="--runtime onnxruntime runs on the CPU, not on --device cuda:0: leave"):
        runtimes.check_runtime("onnxruntime", "cuda:0")
    monkeypatch.setattr(runtimes, "_installed", lambda name: name != "openvino")
    assert cli_main([*common, "--runtime", "openvino"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--runtime openvino needs openvino, which is not installed: pip install 'dense-encoders[openvino]'" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_runtime_forward_refuses_what_the_graph_cannot_give(family_folders):
    encoder = RetrievalEncoder(family_folders["condenser"], runtime="onnxruntime", show_progress_bar=False)
    forward = encoder.model[0].model.forward
    batch = encoder.model.preprocess(["a text", "b"])
    with pytest.raises(ValueError, match="not hidden states or attentions"):
        forward(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    with pytest.raises(ValueError, match=r"takes \['input_ids', 'attention_mask', 'token_type_ids'\], not "
                                         r"\['position_ids'\]"):
        forward(**{k: v for k, v in batch.items() if k != "modality"}, position_ids=batch["input_ids"])
    with pytest.raises(ValueError, match=r"rows \[1\] of the batch have no tokens"):
        forward(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                attention_mask=torch.stack([batch["attention_mask"][0], torch.zeros_like(batch["attention_mask"][1])]))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_evaluate_and_search_take_the_runtime_and_record_it(runtime, family_folders, tmp_path, capsys):
    """The bundled BEIR set (240 documents) with --k 240: both runs hold every pair, so the scores compare one by
    one whatever the near-ties do to the order."""
    beir = Path(dense_encoders.__file__).parent / "resources" / "quickstart_beir"
    folder = family_folders["infused-cls"]
    runs = {}
    for name in ("torch", runtime):
        output, run = tmp_path / f"{name}.json", tmp_path / f"{name}.trec"
        assert cli_main(["evaluate", str(folder), str(beir), "--split", "test", "--k", "240", "--output",
                         str(output), "--run-output", str(run), "--runtime", name, "--no-progress"]) == 0
        recorded = json.loads(output.read_text())["settings"]["runtime"]
        assert recorded == {"name": name, "version": runtimes.runtime_version(name)}
        runs[name] = {tuple(line.split()[::2][:2]): float(line.split()[4]) for line in run.read_text().splitlines()}
    assert runs["torch"].keys() == runs[runtime].keys()
    assert max(abs(runs["torch"][pair] - runs[runtime][pair]) for pair in runs["torch"]) <= ATOL
    # search: queries encoded here, in the runtime, against torch's shards
    shards = tmp_path / "shards"
    assert cli_main(["encode", str(folder), str(beir), "--output", str(shards), "--dtype", "float32",
                     "--no-progress"]) == 0
    assert cli_main(["search", str(shards), str(beir / "queries.jsonl"), "--k", "5", "--output",
                     str(tmp_path / "search.trec"), "--runtime", runtime, "--no-progress"]) == 0
    capsys.readouterr()
    assert len((tmp_path / "search.trec").read_text().splitlines()) == 5 * 300


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache of exports and runtime choices of this test's own: a choice measured here must not reach other
    tests' models of the same shape."""
    monkeypatch.setenv("DENSE_ENCODERS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "runtimes"


def _encode_cli(folder, texts, output, *flags) -> dict:
    assert cli_main(["encode", str(folder), str(texts), "--output", str(output), "--batch-size", "2", "--dtype",
                     "float32", "--shard-size", "4", "--no-progress", *flags]) == 0
    return json.loads((Path(output) / "manifest.json").read_text())["settings"]


@pytest.mark.skipif(len(runtimes.installed_runtimes()) < 2, reason="no runtime besides torch is installed: pip "
                    "install -e '.[test]'")
def test_auto_measures_the_runtimes_once_and_runs_the_fastest(family_folders, tmp_path, own_cache, monkeypatch):
    """--runtime auto (the default) on a workload it measures for: every installed runtime timed on the same
    batches, the measurement kept (cache/choices), the fastest of it recorded in the shards with the measurement,
    and torch's vectors; a second run of the shape measures nothing."""
    folder, texts = family_folders["infused-cls"], tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 3) + "\n")
    monkeypatch.setattr(runtimes, "AUTO_MEASURE_TEXTS", len(TEXTS * 3))
    settings = _encode_cli(folder, texts, tmp_path / "auto")
    (kept,) = (own_cache / "choices").iterdir()
    seconds = json.loads(kept.read_text())["seconds"]
    assert sorted(seconds) == sorted(runtimes.installed_runtimes()) and len(seconds) > 1
    fastest = min(seconds, key=seconds.get)
    assert (settings["runtime"], settings["runtime_version"]) == (fastest, runtimes.runtime_version(fastest))
    assert settings["runtime_choice"]["chosen_by"] == "auto"
    assert settings["runtime_choice"]["measured_seconds"] == seconds
    assert settings["runtime_choice"]["reason"].startswith(f"{fastest}: the fastest installed on this machine")
    stored = np.concatenate([e for _, e, _ in EmbeddingShards.open(tmp_path / "auto").shards()])
    np.testing.assert_allclose(stored, _vectors(folder, "torch", device="cpu")[list(range(5)) * 3], rtol=0, atol=ATOL)
    monkeypatch.setattr(runtimes, "measure_runtimes", lambda *a, **k: pytest.fail("measured twice"))
    again = _encode_cli(folder, texts, tmp_path / "again")
    assert again["runtime"] == fastest and again["runtime_choice"]["measured_seconds"] == seconds


@NEEDS_OPENVINO
def test_auto_below_the_measured_workload_runs_what_costs_nothing_to_start(family_folders, tmp_path, own_cache,
                                                                           monkeypatch):
    """A workload smaller than AUTO_MEASURE_TEXTS is not worth a measurement, nor an export: torch, the reason
    recorded, unless this machine's measurement names another runtime and this model's export is there already."""
    folder, texts = family_folders["condenser"], tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    settings = _encode_cli(folder, texts, tmp_path / "small")
    assert settings["runtime"] == "torch"
    assert settings["runtime_choice"]["reason"] == (f"torch: 5 texts, fewer than the {runtimes.AUTO_MEASURE_TEXTS:,} "
                                                    "auto measures the runtimes for (--runtime chooses one)")
    assert not (own_cache / "choices").exists()
    # a measurement that names OpenVINO the fastest (written as choose_runtime keeps one), before and after the
    # model's export is made
    encoder = RetrievalEncoder(folder, batch_size=2, show_progress_bar=False)
    key = runtimes._choice_key(encoder.model, runtimes.installed_runtimes(), 2, encoder.max_lengths["document"])
    seconds = {name: 2.0 for name in key["versions"]} | {"openvino": 1.0}
    digest = runtimes.hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    (own_cache / "choices").mkdir(parents=True)
    (own_cache / "choices" / f"{digest}.json").write_text(json.dumps({"key": key, "seconds": seconds}))
    settings = _encode_cli(folder, texts, tmp_path / "not-exported")
    assert settings["runtime"] == "torch" and "openvino is the fastest here" in settings["runtime_choice"]["reason"]
    RetrievalEncoder(folder, runtime="openvino", show_progress_bar=False)  # its export, now in the cache
    settings = _encode_cli(folder, texts, tmp_path / "exported")
    assert settings["runtime"] == "openvino" and settings["runtime_choice"]["measured_seconds"] == seconds


@NEEDS_OPENVINO
def test_auto_continues_a_run_in_the_runtime_it_began_in(family_folders, tmp_path, own_cache):
    folder, texts = family_folders["tite-late"], tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 3) + "\n")
    first = _encode_cli(folder, texts, tmp_path / "run", "--runtime", "openvino")
    expected = np.concatenate([e for _, e, _ in EmbeddingShards.open(tmp_path / "run").shards()])
    (tmp_path / "run" / "manifest.json").unlink()
    (tmp_path / "run" / "shard-00001.safetensors").unlink()
    again = _encode_cli(folder, texts, tmp_path / "run")  # auto would choose torch for 15 texts
    assert again["runtime"] == first["runtime"] == "openvino"
    np.testing.assert_array_equal(np.concatenate([e for _, e, _ in EmbeddingShards.open(tmp_path / "run").shards()]),
                                  expected)


def test_evaluate_records_what_auto_chose_and_why(family_folders, tmp_path):
    beir = Path(dense_encoders.__file__).parent / "resources" / "quickstart_beir"
    output = tmp_path / "results.json"
    assert cli_main(["evaluate", str(family_folders["condenser"]), str(beir), "--split", "test", "--output",
                     str(output), "--no-progress"]) == 0
    recorded = json.loads(output.read_text())["settings"]["runtime"]
    assert recorded["name"] == "torch" and recorded["chosen_by"] == "auto"
    # both sides count: 100 test queries and 240 documents
    assert recorded["reason"].startswith("torch: 340 texts, fewer than the"), recorded


def test_the_search_command_over_shards_starts_without_transformers_models(family_folders, tmp_path):
    """`dense-encoders search` over embedding shards loads no model, so its process imports neither
    sentence-transformers nor transformers' models (seconds of CPU at each start); with queries given as texts it
    registers our families and encodes them with the corpus's model (a TITE folder: no --trust-remote-code)."""
    import subprocess
    import sys

    texts, folder = tmp_path / "texts.txt", family_folders["tite-late"]
    texts.write_text("\n".join(TEXTS) + "\n")
    _encode_cli(folder, texts, tmp_path / "corpus")
    assert cli_main(["encode", str(folder), str(texts), "--queries", "--output", str(tmp_path / "queries"),
                     "--no-progress"]) == 0
    runs = {}
    for name, queries in (("shards", tmp_path / "queries"), ("texts", texts)):
        runs[name] = tmp_path / f"{name}.trec"
        argv = ["dense-encoders", "search", str(tmp_path / "corpus"), str(queries), "--k", "3", "--output",
                str(runs[name]), "--no-progress"]
        code = (f"import sys; sys.argv = {argv!r}; from dense_encoders.cli import main; code = main(); "
                "print(code, sorted(m for m in ('sentence_transformers', 'transformers.models.bert') if m in "
                "sys.modules))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        expected = "[]" if name == "shards" else "['sentence_transformers', 'transformers.models.bert']"
        assert done.stdout.strip() == f"0 {expected}", (done.stdout, done.stderr[-2000:])
    for run in runs.values():
        assert sorted({line.split()[0] for line in run.read_text().splitlines()}) == ["1", "2", "3", "4", "5"]
        assert len(run.read_text().splitlines()) == 15
