"""Publishing against a loopback Hub: round trips per family, cards, refusals, failures, Trainer pushes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hub_server import LoopbackHub

from dense_encoders.hub import PushError, check_remote_code, push_to_hub, upload_files

TEXTS = ["dense retrieval on the hub", "a second, somewhat longer text to embed"]


@pytest.fixture
def hub():
    with LoopbackHub(token="hf_looptesttoken123") as server:
        yield server
        assert not server.errors


def tite_folder(tmp_path, tok):
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    torch.manual_seed(0)
    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def condenser_folder(tmp_path, tok):
    from conftest import tiny_condenser_config

    from dense_encoders import CondenserModel

    torch.manual_seed(0)
    folder = tmp_path / "condenser"
    CondenserModel(tiny_condenser_config(vocab_size=len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def infused_folder(tmp_path, tok):
    from transformers import BertConfig, BertForSequenceClassification

    from dense_encoders.trainer.infusion import infuse, save_dual_encoder

    torch.manual_seed(0)
    ce = tmp_path / "ce"
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64, num_labels=1)).save_pretrained(ce)
    tok.save_pretrained(ce)
    model, tokenizer = infuse(str(ce))
    return save_dual_encoder(model, tokenizer, tmp_path / "infused")


def local_embeddings(folder, tok):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        return model(**tok(TEXTS, padding=True, return_tensors="pt")).pooler_output.numpy()


DOWNLOAD = """
import json, sys, torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
from huggingface_hub import ModelCard
repo, revision, texts = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
tok = AutoTokenizer.from_pretrained(repo, revision=revision, trust_remote_code=True)
model = AutoModel.from_pretrained(repo, revision=revision, trust_remote_code=True).eval()
with torch.no_grad():
    auto = model(**tok(texts, padding=True, return_tensors="pt")).pooler_output
st = SentenceTransformer(repo, revision=revision, trust_remote_code=True).encode(texts)
card = ModelCard.load(repo) if revision is None else None
print("RESULT" + json.dumps({"auto": auto.tolist(), "st": st.tolist(), "type": type(model).__name__,
                             "tags": card.data.tags if card else None}))
"""


def download(hub, tmp_path, repo, revision="", offline=False):
    env = hub.env(hf_home=tmp_path / "hf_home", offline=offline)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, as local_embeddings, also on a GPU machine
    result = subprocess.run([sys.executable, "-c", DOWNLOAD, repo, revision, json.dumps(TEXTS)], env=env,
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout[result.stdout.rindex("RESULT") + 6:].splitlines()[0])


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("family", ["tite", "condenser", "infused"])
def test_round_trip_per_family(hub, tmp_path, tok, family):
    folder = {"tite": tite_folder, "condenser": condenser_folder, "infused": infused_folder}[family](tmp_path, tok)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    repo = f"loopback-user/{family}-tiny"
    with hub.in_process():
        commit = push_to_hub(folder, repo, token=hub.token, license="apache-2.0")
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # nothing local touched
    commits = [r for r in hub.requests if r.method == "POST" and "/commit/" in r.path]
    assert len(commits) == 1 and commit.oid
    files = hub.repo_files(repo)
    assert "README.md" in files and "model.safetensors" in files and "modules.json" in files
    assert f"modeling_{family}.py" in files and not any(name.endswith((".bin", ".pt")) for name in files)
    expected = local_embeddings(folder, tok)
    online = download(hub, tmp_path, repo)
    np.testing.assert_allclose(online["auto"], expected, atol=1e-5)
    if family == "infused":  # trained with cosine: it ships unit vectors (a Normalize module)
        expected_st = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    else:
        expected_st = expected
    np.testing.assert_allclose(online["st"], expected_st, atol=1e-5)
    assert {"dense-encoders", "sentence-transformers"} <= set(online["tags"])
    served = len(hub.requests)
    offline = download(hub, tmp_path, repo, offline=True)  # from the cache, no request
    np.testing.assert_allclose(offline["auto"], expected, atol=1e-5)
    assert len(hub.requests) == served


@pytest.mark.slow
def test_revision_branch_and_pull_request(hub, tmp_path, tok):
    folder = tite_folder(tmp_path, tok)
    repo = "loopback-user/tite-revisions"
    with hub.in_process():
        push_to_hub(folder, repo, token=hub.token, private=True)
        # a second version of the weights on a branch, and a third as a pull request
        from dense_encoders.models.tite import TiteModel

        model = TiteModel.from_pretrained(folder)
        with torch.no_grad():
            model.embeddings.word_embeddings.weight.mul_(2.0)
        v2 = tmp_path / "v2"
        model.save_pretrained(v2)
        tok.save_pretrained(v2)
        push_to_hub(v2, repo, token=hub.token, revision="v2", commit_message="scaled embeddings")
        pr = push_to_hub(v2, repo, token=hub.token, create_pr=True)
    assert pr.pr_url and "refs/pr/1" in pr.pr_revision
    assert hub.repo_files(repo, "v2")["model.safetensors"] != hub.repo_files(repo)["model.safetensors"]
    env_token = hub.env(hf_home=tmp_path / "hf_home", token=True)
    code = ("import sys, torch; from transformers import AutoModel; "
            "m = AutoModel.from_pretrained(sys.argv[1], revision=sys.argv[2], trust_remote_code=True); "
            "print('NORM', float(m.embeddings.word_embeddings.weight.norm()))")
    norms = {}
    for revision in ("main", "v2"):
        result = subprocess.run([sys.executable, "-c", code, repo, revision], env=env_token, capture_output=True,
                                text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        norms[revision] = float(result.stdout.split("NORM")[-1])
    assert norms["v2"] == pytest.approx(2 * norms["main"], rel=1e-5)


def test_refusals_and_failures_leave_the_folder_alone(hub, tmp_path, tok):
    folder = tite_folder(tmp_path, tok)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((folder / "config.json").read_text())
    torch.save({"w": torch.zeros(2)}, pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pickled files \['pytorch_model.bin'\].*safetensors"):
        upload_files(pickled)
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    for name in ("config.json", "model.safetensors"):
        (incomplete / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(ValueError, match=r"configuration_tite.py is missing|modeling_tite.py is missing"):
        upload_files(incomplete)
    # training state is skipped, never uploaded
    torch.save({"step": 1}, folder / "optimizer.pt")
    assert "optimizer.pt" not in {p.name for p in upload_files(folder)}
    snapshot = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with hub.in_process():
        with pytest.raises(PushError) as caught:
            push_to_hub(folder, "loopback-user/denied", token="hf_wrongtoken999999")
    message = str(caught.value)
    assert "401" in message or "token" in message
    assert "Nothing local was changed; retry with: dense-encoders push" in message
    assert "hf_wrongtoken999999" not in message and hub.token not in message
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == snapshot
    with hub.in_process():  # an unreachable Hub: same promise
        with pytest.raises(PushError, match="Nothing local was changed"):
            push_to_hub(folder, "loopback-user/x", token=hub.token, endpoint="http://127.0.0.1:9")


def test_check_remote_code(tmp_path, tok, caplog):
    folder = tite_folder(tmp_path, tok)
    assert check_remote_code(folder) == []
    modeling = folder / "modeling_tite.py"
    modeling.write_text(modeling.read_text().replace('DENSE_ENCODERS_CODE_VERSION = "0.1.0"',
                                                     'DENSE_ENCODERS_CODE_VERSION = "0.0.9"'))
    warnings = check_remote_code(folder)
    assert len(warnings) == 1 and "written by dense-encoders 0.0.9, older than the installed" in warnings[0]
    modeling.unlink()
    with pytest.raises(ValueError, match="has no modeling_tite.py: its remote code is incomplete"):
        check_remote_code(folder)


def test_code_version_marker_matches_the_package():
    import dense_encoders
    from dense_encoders.models.condenser import modeling_condenser
    from dense_encoders.models.infused import modeling_infused
    from dense_encoders.models.tite import modeling_tite

    for module in (modeling_condenser, modeling_tite, modeling_infused):
        assert module.DENSE_ENCODERS_CODE_VERSION == dense_encoders.__version__, module.__name__


@pytest.mark.slow
def test_trainer_pushes_our_card_and_no_pickles(hub, tmp_path, tok):
    from transformers import BertConfig, BertModel

    from dense_encoders.data.distillation import DistillationCollator, training_records_to_dataset
    from dense_encoders.trainer.distillation import DistillationArguments, DistillationTrainer, DualEncoder

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64), add_pooling_layer=False)
    records = [{"query_id": f"q{i}", "query": f"query {i}", "documents": [f"doc {i} {j}" for j in range(3)],
                "scores": [2.0, 1.0, 0.0]} for i in range(4)]
    repo = "loopback-user/distilled-bert"
    with hub.in_process():
        args = DistillationArguments(
            output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=2, use_cpu=True,
            save_strategy="steps", save_steps=1, push_to_hub=True, hub_model_id=repo, hub_token=hub.token,
            hub_strategy="every_save", logging_steps=1,
        )
        trainer = DistillationTrainer(
            model=DualEncoder(encoder, "mean", "cosine"), args=args, train_dataset=training_records_to_dataset(records),
            data_collator=DistillationCollator(tok, documents_per_query=3, document_max_length=16, query_max_length=8),
            processing_class=tok, objective="margin_mse+kl",
        )
        trainer.train()
        trainer.push_to_hub()
    files = hub.repo_files(repo)
    assert {"model.safetensors", "config.json", "modules.json", "README.md", "tokenizer.json"} <= set(files)
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in files)  # no training_args.bin, no optimizer
    readme = files["README.md"].decode()
    assert "dense-encoders" in readme and "## Usage" in readme and "generated automatically by the Trainer" not in readme
    commits = [r for r in hub.requests if r.method == "POST" and "/commit/" in r.path and r.status == 200]
    assert len(commits) >= 2  # checkpoint pushes during training, then the final push
