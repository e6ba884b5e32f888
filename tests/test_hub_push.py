"""Publishing against a loopback Hub: round trips per family, cards, refusals, failures, Trainer pushes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
import torch
from hub_server import LoopbackHub

from dense_encoders.hub import PushError, push_to_hub, upload_files

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
                                             num_attention_heads=4, intermediate_size=64,
                                             num_labels=1)).save_pretrained(ce)
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
    assert ("dense-encoders" in readme and "## Usage" in readme
            and "generated automatically by the Trainer" not in readme)
    commits = [r for r in hub.requests if r.method == "POST" and "/commit/" in r.path and r.status == 200]
    assert len(commits) >= 2  # checkpoint pushes during training, then the final push


# ---- what goes up: the model's files, nothing else (issue 35, item 3) ------------------------------------


def push_command(hub, folder, repo, *extra) -> int:
    """``dense-encoders push FOLDER --repo-id REPO`` against the loopback Hub, in this process."""
    from dense_encoders.cli import main

    with hub.in_process():
        return main(["push", str(folder), "--repo-id", repo, "--token", hub.token, "--endpoint", hub.endpoint, *extra])


def commits_to(hub, repo) -> int:
    return sum(1 for r in hub.requests if r.method == "POST" and f"/{repo}/commit/" in r.path and r.status == 200)


def folder_files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_links_are_followed_only_inside_the_folder(hub, tmp_path, tok, capsys):
    folder = tite_folder(tmp_path, tok)
    model_files = folder_files(folder)
    # the weights live in a checkpoint of the run and the folder links to them: inside, so their content goes up
    (folder / "checkpoint-6").mkdir()
    (folder / "model.safetensors").rename(folder / "checkpoint-6" / "model.safetensors")
    (folder / "model.safetensors").symlink_to("checkpoint-6/model.safetensors")
    # a link to a file outside the folder, under a name of the model's
    private = tmp_path / "private"
    private.mkdir()
    (private / "tokenizer_config.json").write_text('{"api_key": "outside-secret"}')
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").symlink_to(private / "tokenizer_config.json")
    capsys.readouterr()
    assert push_command(hub, folder, "loopback-user/linked") == 2
    err = capsys.readouterr().err
    assert f"tokenizer_config.json -> {private / 'tokenizer_config.json'}" in err and "(1 in all)" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert commits_to(hub, "loopback-user/linked") == 0
    # the link replaced by the file itself: the whole model goes up, the weights through the inside link
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_bytes(model_files["tokenizer_config.json"])
    assert push_command(hub, folder, "loopback-user/linked") == 0
    files = hub.repo_files("loopback-user/linked")
    assert set(files) == set(model_files) | {"README.md", ".gitattributes"}
    assert all(files[name] == content for name, content in model_files.items() if name != "README.md")
    assert b"outside-secret" not in b"".join(files.values())


def test_a_cache_snapshot_uploads_the_whole_model(hub, tmp_path, tok, capsys):
    from huggingface_hub import snapshot_download

    folder = tite_folder(tmp_path, tok)
    with hub.in_process():
        push_to_hub(folder, "loopback-user/original", token=hub.token, endpoint=hub.endpoint)
        snapshot = Path(snapshot_download("loopback-user/original", cache_dir=tmp_path / "cache",
                                          endpoint=hub.endpoint, token=hub.token))
    # what the cache holds: models--org--name/snapshots/<revision>/<file> -> ../../blobs/<hash>
    assert snapshot.parent.name == "snapshots" and snapshot.parent.parent.name == "models--loopback-user--original"
    assert (snapshot / "model.safetensors").is_symlink()
    assert (snapshot / "model.safetensors").resolve().parent == snapshot.parent.parent / "blobs"
    capsys.readouterr()
    assert push_command(hub, snapshot, "loopback-user/copy") == 0
    original, copy = hub.repo_files("loopback-user/original"), hub.repo_files("loopback-user/copy")
    assert set(copy) == set(original)
    assert {name for name in copy if copy[name] != original[name]} == {"README.md"}  # the card names its repo
    assert "loopback-user/copy" in copy["README.md"].decode()
    # a link in the snapshot to anything but its repository's blobs is refused
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (snapshot / "generation_config.json").symlink_to(elsewhere)
    assert push_command(hub, snapshot, "loopback-user/copy-2") == 2
    assert f"generation_config.json -> {elsewhere}" in capsys.readouterr().err
    assert commits_to(hub, "loopback-user/copy-2") == 0


def test_files_that_are_not_the_model_are_refused_unless_included(hub, tmp_path, tok, capsys):
    folder = tite_folder(tmp_path, tok)
    model_files = folder_files(folder)
    # what a run of ours leaves beside the model: records the card summarises, a checkpoint, evaluation results
    records = {"distillation_setup.json": {"train_file": "/home/someone/data/train.jsonl", "losses": "kl"},
               "trainer_state.json": {"global_step": 2, "epoch": 1.0, "log_history": []},
               "training_environment.json": {"device": "cpu"}, "training_args.json": {"output_dir": "/home/someone"}}
    for name, record in records.items():
        (folder / name).write_text(json.dumps(record))
    (folder / "checkpoint-2").mkdir()
    torch.save({"step": 2}, folder / "checkpoint-2" / "optimizer.pt")
    (folder / "evaluation").mkdir()
    (folder / "evaluation" / "notes.json").write_text("{}")
    # and what is no part of any model
    (folder / ".env").write_text("HF_TOKEN=hf_abcdefghijklmnop\n")
    (folder / "teacher_scores.jsonl").write_text('{"query_id": "q1", "scores": [1.0]}\n')
    capsys.readouterr()
    assert push_command(hub, folder, "loopback-user/strays") == 2
    err = capsys.readouterr().err
    assert "not part of a model" in err and ".env, teacher_scores.jsonl (2 in all)" in err and "--include" in err
    assert err.count("\n") == 1 and "hf_abcdefghijklmnop" not in err
    assert commits_to(hub, "loopback-user/strays") == 0
    assert push_command(hub, folder, "loopback-user/strays", "--include", "*.jsonl") == 2  # .env still refused
    assert ".env (1 in all)" in capsys.readouterr().err
    (folder / ".env").unlink()
    assert push_command(hub, folder, "loopback-user/strays", "--include", "no-such-*.txt") == 2
    assert "--include no-such-*.txt: matches no file" in capsys.readouterr().err
    assert push_command(hub, folder, "loopback-user/strays", "--include", "teacher_*.jsonl") == 0
    files = hub.repo_files("loopback-user/strays")
    assert set(files) == set(model_files) | {"README.md", ".gitattributes", "teacher_scores.jsonl"}
    assert "distillation losses: `kl`" in files["README.md"].decode()  # the records speak through the card
    # many strays: a few named, all counted
    for index in range(7):
        (folder / f"note-{index}.txt").write_text("x")
    with pytest.raises(ValueError, match=r"note-0.txt, note-1.txt, note-2.txt, note-3.txt, note-4.txt and 3 more "
                                         r"\(8 in all\)"):
        upload_files(folder)


def test_sentence_transformers_module_folders_go_up_and_nothing_else_in_them(hub, tmp_path, tok, capsys):
    from sentence_transformers.base.modules.dense import Dense
    from transformers import BertConfig, BertModel

    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    torch.manual_seed(0)
    folder = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=32)).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_sentence_transformers_files(folder, pooling="mean", similarity="cosine")
    (folder / "2_Dense").mkdir()
    Dense(16, 8).save(str(folder / "2_Dense"))
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": "2_Dense",
                    "type": "sentence_transformers.base.modules.dense.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    model_files = folder_files(folder)
    assert {"1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors"} <= set(model_files)
    (folder / "2_Dense" / "train.tsv").write_text("q1\td1\n")
    capsys.readouterr()
    assert push_command(hub, folder, "loopback-user/dense") == 2
    assert "2_Dense/train.tsv (1 in all)" in capsys.readouterr().err
    (folder / "2_Dense" / "train.tsv").unlink()
    assert push_command(hub, folder, "loopback-user/dense") == 0
    files = hub.repo_files("loopback-user/dense")
    assert set(files) == set(model_files) | {"README.md", ".gitattributes"}
    assert all(files[name] == content for name, content in model_files.items() if name != "README.md")


def test_remote_code_of_a_custom_sentence_transformers_module_goes_up(tmp_path, tok):
    folder = tite_folder(tmp_path, tok)
    (folder / "custom_st.py").write_text("class Shout:\n    pass\n")
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": "", "type": "custom_st.Shout"})
    (folder / "modules.json").write_text(json.dumps(modules))
    assert "custom_st.py" in {p.as_posix() for p in upload_files(folder)}
    (folder / "leftover_st.py").write_text("class Other:\n    pass\n")  # reached by nothing: refused
    with pytest.raises(ValueError, match="auto_map does not use: leftover_st.py"):
        upload_files(folder)


def infuse_output(tmp_path, tok) -> Path:
    """The layout `dense-encoders infuse --also-random` writes: the trained DE-N-CE in the folder, its initial
    weights in initial/, the DE-N-Rand in random/ (with its own initial/): four models, each loadable."""
    from dense_encoders.trainer.infusion import save_dual_encoder

    trained = infused_folder(tmp_path, tok)
    from transformers import AutoTokenizer

    from dense_encoders import InfusedDualEncoderModel

    model, tokenizer = InfusedDualEncoderModel.from_pretrained(trained), AutoTokenizer.from_pretrained(trained)
    for nested in ("initial", "random", "random/initial"):
        save_dual_encoder(model, tokenizer, trained / nested)
    (trained / "random" / "training_args.json").write_text("{}")  # a record of the nested run
    return trained


def test_a_folder_holding_other_models_is_refused_unless_they_are_skipped(hub, tmp_path, tok, capsys):
    """One model per repository: infuse's output (the DE in the folder, initial/ and random/ beside it) is
    refused naming the nested models; --skip-nested-models uploads the folder's own model only, and a nested
    folder pushed on its own is one model too. A sentence-transformers module folder with weights is no model."""
    from dense_encoders.hub.push import nested_model_folders

    assert nested_model_folders(["config.json", "model.safetensors", "random/config.json", "random/model.safetensors",
                                 "random/initial/config.json", "random/initial/model.safetensors",
                                 "old/config.json", "old/pytorch_model.bin", "2_Dense/config.json",
                                 "2_Dense/model.safetensors", "notes/config.json"],
                                module_folders=[PurePosixPath("2_Dense")]) == [PurePosixPath("old"),
                                                                                PurePosixPath("random")]
    folder = infuse_output(tmp_path, tok)
    model_files = {name for name in folder_files(folder) if "/" not in name or name.split("/")[0].endswith(
        ("_Pooling", "_Normalize"))}
    repo = "loopback-user/de-2-ce"
    capsys.readouterr()
    assert push_command(hub, folder, repo) == 2
    err = capsys.readouterr().err
    assert "holds other models: initial/, random/" in err and "a repository holds one model" in err
    assert "--skip-nested-models" in err and err.count("\n") == 1
    assert push_command(hub, folder, repo, "--include", "random/*") == 2  # --include does not pull a model in
    assert "holds other models" in capsys.readouterr().err
    assert commits_to(hub, repo) == 0
    assert push_command(hub, folder, repo, "--skip-nested-models", "--include", "random/*") == 2
    assert "--include random/*: matches no file" in capsys.readouterr().err
    assert push_command(hub, folder, repo, "--skip-nested-models") == 0
    files = hub.repo_files(repo)
    assert set(files) == model_files | {"README.md", ".gitattributes"}
    assert [name for name in files if name.endswith(".safetensors")] == ["model.safetensors"]
    assert files["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    assert push_command(hub, folder / "random", "loopback-user/de-2-rand", "--skip-nested-models") == 0
    assert [name for name in hub.repo_files("loopback-user/de-2-rand") if name.endswith(".safetensors")] == [
        "model.safetensors"]


def test_the_retry_hint_repeats_the_whole_command_without_the_token(hub, tmp_path, tok, capsys):
    """A failed push prints the command that repeats it: every flag given (results, license, endpoint, ...),
    never the token."""
    import shlex

    from dense_encoders.data.retrieval import RetrievalDataset
    from dense_encoders.evaluation import evaluate_retrieval, save_results

    folder = tite_folder(tmp_path, tok)
    dataset = RetrievalDataset(name="toy", split="test", corpus={f"d{i}": {"title": "", "text": f"document {i}"}
                                                                 for i in range(4)},
                               queries={"q0": "document 1"}, qrels={"q0": {"d1": 1}})
    results = save_results(evaluate_retrieval(str(folder), dataset, no_progress=True), tmp_path / "toy results.json")
    given = {"--repo-id": "loopback-user/retry", "--revision": "v2", "--commit-message": "second try",
             "--results": str(results), "--license": "apache-2.0", "--include": "notes.txt",
             "--endpoint": "http://127.0.0.1:9"}  # nothing listens on port 9: the push fails
    (folder / "notes.txt").write_text("how it was trained\n")
    from dense_encoders.cli import main

    capsys.readouterr()
    argv = ["push", str(folder), *[part for item in given.items() for part in item], "--private",
            "--skip-nested-models"]
    assert main([*argv, "--token", "hf_secrettoken12345"]) == 2
    err = capsys.readouterr().err
    assert "hf_secrettoken12345" not in err and "--token" not in err and err.count("\n") == 1
    retry = shlex.split(err.split("retry with: ", 1)[1].strip())
    assert retry[:3] == ["dense-encoders", "push", str(folder)]
    switches = [part for part in retry[3:] if part in ("--private", "--skip-nested-models")]
    options = [part for part in retry[3:] if part not in switches]
    assert sorted(switches) == ["--private", "--skip-nested-models"]
    assert dict(zip(options[::2], options[1::2])) == given and len(options) == 2 * len(given)


def test_an_unchanged_push_says_nothing_changed(hub, tmp_path, tok, capsys):
    """Pushing the same folder again, or as a pull request, makes no commit: `push` says "nothing changed" and
    that no pull request was opened; a changed folder still opens one."""
    folder = tite_folder(tmp_path, tok)
    repo = "loopback-user/unchanged"
    assert push_command(hub, folder, repo) == 0
    assert capsys.readouterr().out.startswith(f"pushed {folder} -> ")
    assert push_command(hub, folder, repo, "--create-pr") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"nothing changed: {repo} at main already holds these files")
    assert out.rstrip().endswith("no commit made, no pull request opened")
    assert push_command(hub, folder, repo) == 0
    assert capsys.readouterr().out.rstrip().endswith("already holds these files ("
                                                     f"{hub.endpoint}/{repo}/commit/{commit_oid(hub, repo)}); "
                                                     "no commit made")
    assert commits_to(hub, repo) == 1
    with hub.in_process():
        result = push_to_hub(folder, repo, token=hub.token, create_pr=True)
    assert result.changed is False and result.pr_url is None
    (folder / "notes.txt").write_text("changed\n")
    assert push_command(hub, folder, repo, "--create-pr", "--include", "notes.txt") == 0
    assert "(pull request " in capsys.readouterr().out and commits_to(hub, repo) == 2


def commit_oid(hub, repo) -> str:
    from huggingface_hub import HfApi

    with hub.in_process():
        return HfApi(endpoint=hub.endpoint, token=hub.token).repo_info(repo).sha


@pytest.mark.slow
def test_exported_backend_files_go_up_and_nothing_else_beside_them(hub, tmp_path, tok, capsys):
    """``dense-encoders export`` writes the files of sentence-transformers' ONNX and OpenVINO backends into the folder
    (tests/test_other_stacks.py loads them there); push uploads exactly those, and refuses a stray file beside them."""
    from dense_encoders.cli import main

    folder = tite_folder(tmp_path, tok)
    assert main(["export", str(folder)]) == 0
    exported = {name for name in folder_files(folder) if name.startswith(("onnx/", "openvino/"))}
    assert {"onnx/model.onnx", "openvino/openvino_model.xml", "openvino/openvino_model.bin"} <= exported
    model_files = folder_files(folder)
    (folder / "onnx" / "notes.txt").write_text("how I exported it")
    capsys.readouterr()
    assert push_command(hub, folder, "loopback-user/backends") == 2
    assert "onnx/notes.txt (1 in all)" in capsys.readouterr().err
    (folder / "onnx" / "notes.txt").unlink()
    assert push_command(hub, folder, "loopback-user/backends") == 0
    files = hub.repo_files("loopback-user/backends")
    assert set(files) == set(model_files) | {"README.md", ".gitattributes"}
    assert all(files[name] == model_files[name] for name in exported)
    # the card says how to load them: OpenVINO with the float32 hint tests/test_other_stacks.py loads it with
    card = files["README.md"].decode()
    block = card[card.index("```python\nfrom sentence_transformers", card.index("exported for")) + 9:]
    block = block[: block.index("```")]
    compile(block, "card", "exec")
    assert 'backend="onnx", trust_remote_code=True)' in block
    assert ('backend="openvino", trust_remote_code=True,\n    model_kwargs={"ov_config": {"INFERENCE_PRECISION_HINT": '
            '"f32"}})') in block
