"""tests/hub_server.py against the real clients: huggingface_hub in this process (``HfApi(endpoint=...)`` inside
``hub.in_process()``) and in subprocesses (``env=hub.env(...)``: HF_ENDPOINT, HF_HUB_DISABLE_XET=1 set before the
import), and transformers' push_to_hub / from_pretrained."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hub_server import LoopbackHub, git_blob_sha1
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFolder

# huggingface_hub's own LFS upload passes a file object as `data=`, which httpx2 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

TOKEN = "hf_loopback_secret_0123456789"
THRESHOLD = 64 * 1024  # small LFS threshold keeps the "large file" test fast


@pytest.fixture
def hub():
    with LoopbackHub(token=TOKEN, lfs_threshold=THRESHOLD) as server, server.in_process():
        yield server
    assert not server.errors, "\n".join(server.errors)


@pytest.fixture
def api(hub):
    return HfApi(endpoint=hub.endpoint, token=hub.token)


def calls(hub: LoopbackHub, method: str, fragment: str) -> list:
    return [r for r in hub.requests if r.method == method and fragment in r.path]


def run_client(code: str, env: dict, *args: str, timeout: int = 300) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last, which is returned."""
    command = [sys.executable, "-c", textwrap.dedent(code), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"client failed:\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_whoami_and_create_repo_public_private_exist_ok(api, hub):
    assert api.whoami()["name"] == hub.user
    url = api.create_repo("loopback-org/public-model")
    assert url == f"{hub.endpoint}/loopback-org/public-model" and url.repo_id == "loopback-org/public-model"
    assert api.create_repo("loopback-org/private-model", private=True).repo_id == "loopback-org/private-model"

    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("loopback-org/public-model")
    assert conflict.value.response.status_code == 409
    assert api.create_repo("loopback-org/public-model", exist_ok=True).repo_id == url.repo_id
    assert api.create_repo("no-namespace").repo_id == f"{hub.user}/no-namespace"
    assert api.create_repo("loopback-org/data", repo_type="dataset").repo_type == "dataset"

    assert api.model_info("loopback-org/public-model").private is False
    assert api.model_info("loopback-org/private-model").private is True
    assert api.list_repo_files("loopback-org/public-model") == [".gitattributes"]  # the Hub's initial commit
    assert api.repo_exists("loopback-org/data", repo_type="dataset")
    assert not api.repo_exists("loopback-org/data")  # a dataset, not a model
    api.delete_repo("loopback-org/public-model")
    assert not api.repo_exists("loopback-org/public-model")


def test_upload_folder_regular_and_lfs_paths(api, hub, tmp_path):
    repo_id = api.create_repo("loopback-org/uploads").repo_id
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    text, big, tensors = b"hello loopback hub\n", os.urandom(THRESHOLD + 4321), b"\x08" + os.urandom(200)
    (folder / "notes.txt").write_bytes(text)
    (folder / "sub" / "blob.dat").write_bytes(big)  # LFS by size
    (folder / "weights.safetensors").write_bytes(tensors)  # LFS by pattern, though small

    first = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="add files")
    assert len(calls(hub, "POST", "/api/models/loopback-org/uploads/preupload/main")) == 1
    assert len(calls(hub, "POST", "/loopback-org/uploads.git/info/lfs/objects/batch")) == 1
    assert [r.status for r in calls(hub, "PUT", "/lfs-upload/")] == [200, 200]  # the 2 LFS files, not the text
    assert len(calls(hub, "POST", "/loopback-org/uploads.git/info/lfs/objects/verify")) == 2
    assert len(calls(hub, "POST", "/api/models/loopback-org/uploads/commit/main")) == 1
    stored = hub.repo_files(repo_id)
    assert (stored["notes.txt"], stored["sub/blob.dat"], stored["weights.safetensors"]) == (text, big, tensors)

    listed = sorted(api.list_repo_files(repo_id))
    assert listed == [".gitattributes", "notes.txt", "sub/blob.dat", "weights.safetensors"]
    info = api.model_info(repo_id, files_metadata=True)
    assert info.sha == first.oid and info.id == repo_id
    siblings = {s.rfilename: s for s in info.siblings}
    assert siblings["notes.txt"].lfs is None and siblings["notes.txt"].blob_id == git_blob_sha1(text)
    assert (siblings["sub/blob.dat"].lfs.sha256, siblings["sub/blob.dat"].lfs.size) == (sha256(big), len(big))
    assert siblings["weights.safetensors"].lfs.sha256 == sha256(tensors)

    top = {e.path: e for e in api.list_repo_tree(repo_id)}
    assert sorted(top) == [".gitattributes", "notes.txt", "sub", "weights.safetensors"]
    assert isinstance(top["sub"], RepoFolder)
    assert [e.path for e in api.list_repo_tree(repo_id, path_in_repo="sub")] == ["sub/blob.dat"]
    hub.page_size = 2  # 5 recursive entries -> 3 pages, followed through the Link header
    before = len(calls(hub, "GET", "/tree/main"))
    assert len(list(api.list_repo_tree(repo_id, recursive=True))) == 5
    assert len(calls(hub, "GET", "/tree/main")) - before == 3
    assert len(calls(hub, "GET", "cursor=")) == 2

    # Same folder again: the LFS batch answers "already there" (no PUT), preupload returns the remote oids and the
    # client, seeing nothing changed, commits nothing.
    again = api.upload_folder(repo_id=repo_id, folder_path=folder)
    assert again.oid == first.oid
    assert len(calls(hub, "PUT", "/lfs-upload/")) == 2 and len(calls(hub, "POST", "/commit/main")) == 1

    batches = len(calls(hub, "POST", "/info/lfs/objects/batch"))
    edit = api.create_commit(repo_id, operations=[CommitOperationAdd("notes.txt", b"v2\n")], commit_message="edit")
    assert hub.repo_files(repo_id)["notes.txt"] == b"v2\n"
    assert len(calls(hub, "POST", "/info/lfs/objects/batch")) == batches  # regular path: no LFS traffic
    assert [c.commit_id for c in api.list_repo_commits(repo_id)][:2] == [edit.oid, first.oid]


def test_branches_pull_requests_deletes_and_revisions(api, hub):
    repo_id = api.create_repo("loopback-org/revisions").repo_id
    first = api.upload_file(path_or_fileobj=b"v1", path_in_repo="a.txt", repo_id=repo_id)

    api.create_branch(repo_id, branch="dev")
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_branch(repo_id, branch="dev")
    assert conflict.value.response.status_code == 409
    api.create_branch(repo_id, branch="dev", exist_ok=True)
    dev = api.upload_file(path_or_fileobj=b"dev only", path_in_repo="dev.txt", repo_id=repo_id, revision="dev")
    assert "dev.txt" in api.list_repo_files(repo_id, revision="dev")
    assert "dev.txt" not in api.list_repo_files(repo_id)

    pr = api.upload_file(path_or_fileobj=b"proposal", path_in_repo="pr.txt", repo_id=repo_id, create_pr=True)
    assert (pr.pr_revision, pr.pr_num) == ("refs/pr/1", 1)
    assert "pr.txt" in api.list_repo_files(repo_id, revision="refs/pr/1")
    assert "pr.txt" not in api.list_repo_files(repo_id)
    assert calls(hub, "GET", "/tree/refs%2Fpr%2F1")  # the client sends the ref URL-encoded
    more = api.upload_file(path_or_fileobj=b"more", path_in_repo="pr2.txt", repo_id=repo_id, revision="refs/pr/1")
    assert {"pr.txt", "pr2.txt"} <= set(api.list_repo_files(repo_id, revision="refs/pr/1"))

    refs = api.list_repo_refs(repo_id, include_pull_requests=True)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": first.oid, "dev": dev.oid}
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", more.oid)]

    api.delete_file("a.txt", repo_id)
    assert "a.txt" not in api.list_repo_files(repo_id)
    assert "a.txt" in api.list_repo_files(repo_id, revision=first.oid)  # by commit sha: the old snapshot
    assert api.model_info(repo_id, revision=first.oid).sha == first.oid
    api.create_tag(repo_id, tag="v1", revision=first.oid)
    assert hub.repo_files(repo_id, revision="v1")["a.txt"] == b"v1"

    api.create_commit(repo_id, [CommitOperationAdd(f"folder/{n}.txt", b"x") for n in "ab"], commit_message="add")
    api.create_commit(repo_id, [CommitOperationDelete("folder/")], commit_message="rm folder")
    assert not any(p.startswith("folder/") for p in api.list_repo_files(repo_id))

    with pytest.raises(HfHubHTTPError) as not_a_branch:  # commits go to a branch or a PR, not to a commit sha
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id, revision=first.oid)
    assert not_a_branch.value.response.status_code == 400
    with pytest.raises(RemoteEntryNotFoundError):
        api.delete_file("missing.txt", repo_id)
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(repo_id, revision="no-such-branch")
    with pytest.raises(HfHubHTTPError) as stale:
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id, parent_commit=first.oid)
    assert stale.value.response.status_code == 412


def test_lfs_upload_href_checks_content_and_commit_needs_the_object(api, hub):
    from huggingface_hub.lfs import UploadInfo, post_lfs_batch_info

    repo_id = api.create_repo("loopback-org/lfs-checks").repo_id
    data = os.urandom(1000)
    info = UploadInfo.from_bytes(data)

    def upload_href() -> str:
        actions, errors, transfer = post_lfs_batch_info(
            [info], token=hub.token, repo_type="model", repo_id=repo_id, endpoint=hub.endpoint
        )
        assert (transfer, errors, actions[0]["oid"]) == ("basic", [], sha256(data))
        return actions[0]["actions"]["upload"]["href"]

    def commit_lfs_file() -> int:
        header = {"key": "header", "value": {"summary": "raw"}}
        lfs_file = {"key": "lfsFile", "value": {"path": "x.bin", "algo": "sha256", "oid": sha256(data), "size": 1000}}
        body = "".join(json.dumps(line) + "\n" for line in (header, lfs_file)).encode()
        url = f"{hub.endpoint}/api/models/{repo_id}/commit/main"
        request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {hub.token}"})
        try:
            with urllib.request.urlopen(request) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    with pytest.raises(urllib.error.HTTPError) as rejected:  # bytes that do not match the announced sha256
        urllib.request.urlopen(urllib.request.Request(upload_href(), data=data[::-1], method="PUT"))
    assert rejected.value.code == 400
    assert commit_lfs_file() == 422  # the object was not stored
    with urllib.request.urlopen(urllib.request.Request(upload_href(), data=data, method="PUT")) as response:
        assert response.status == 200
    assert commit_lfs_file() == 200
    assert hub.repo_files(repo_id)["x.bin"] == data
    siblings = {s.rfilename: s for s in api.model_info(repo_id, files_metadata=True).siblings}
    assert siblings["x.bin"].lfs.sha256 == sha256(data)


DOWNLOAD_CLIENT = """
import json, os, sys
from huggingface_hub import hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

mode, repo, private, main_sha = sys.argv[1:5]
paths = {name: hf_hub_download(repo, name) for name in ("config.json", "sub/blob.dat", "weights.safetensors")}
paths["dev:config.json"] = hf_hub_download(repo, "config.json", revision="dev")
paths["dev:dev.txt"] = hf_hub_download(repo, "dev.txt", revision="dev")
paths["sha:config.json"] = hf_hub_download(repo, "config.json", revision=main_sha)
paths["snapshot:main"] = snapshot_download(repo)
paths["snapshot:dev"] = snapshot_download(repo, revision="dev")
errors = {}
if mode == "online":
    for key, call in {
        "missing": lambda: hf_hub_download(repo, "missing.txt"),
        "revision": lambda: hf_hub_download(repo, "config.json", revision="nope"),
        "private-anonymous": lambda: hf_hub_download(private, "secret.txt", token=False),
    }.items():
        try:
            call()
            errors[key] = "no error"
        except (EntryNotFoundError, RevisionNotFoundError, RepositoryNotFoundError) as e:
            errors[key] = type(e).__name__
    paths["private"] = hf_hub_download(private, "secret.txt")  # HF_TOKEN from the environment
print(json.dumps({"paths": paths, "errors": errors}))
"""


def test_downloads_in_subprocess_then_offline_from_cache(api, hub, tmp_path):
    repo_id = api.create_repo("loopback-org/downloads").repo_id
    big, tensors = os.urandom(THRESHOLD + 1), os.urandom(300)
    ops = [("config.json", b'{"hidden_size": 8}\n'), ("sub/blob.dat", big), ("weights.safetensors", tensors)]
    main = api.create_commit(repo_id, [CommitOperationAdd(p, data) for p, data in ops], commit_message="files")
    api.create_branch(repo_id, branch="dev")
    dev_ops = [CommitOperationAdd("config.json", b'{"hidden_size": 16}\n'), CommitOperationAdd("dev.txt", b"dev")]
    api.create_commit(repo_id, dev_ops, commit_message="dev", revision="dev")
    api.create_commit(repo_id, [CommitOperationAdd("later.txt", b"after the sha")], commit_message="later")
    private = api.create_repo("loopback-org/secret", private=True).repo_id
    api.upload_file(path_or_fileobj=b"top secret", path_in_repo="secret.txt", repo_id=private)
    hf_home = tmp_path / "hf_home"
    args = (repo_id, private, main.oid)

    # The resolve headers huggingface_hub relies on, as the Hub sends them for an LFS file.
    head = urllib.request.Request(f"{hub.endpoint}/{repo_id}/resolve/main/sub/blob.dat", method="HEAD")
    with urllib.request.urlopen(head) as response:
        assert response.headers["X-Repo-Commit"] == api.model_info(repo_id).sha
        assert response.headers["X-Linked-Etag"] == response.headers["ETag"] == f'"{sha256(big)}"'
        assert response.headers["X-Linked-Size"] == response.headers["Content-Length"] == str(len(big))

    assert not hf_home.exists()  # a fresh cache: every file must come from the server
    online = run_client(DOWNLOAD_CLIENT, hub.env(hf_home=hf_home, token=True), "online", *args)
    assert online["errors"] == {
        "missing": "RemoteEntryNotFoundError",
        "revision": "RevisionNotFoundError",
        "private-anonymous": "RepositoryNotFoundError",
    }
    paths = online["paths"]
    assert Path(paths.pop("private")).read_bytes() == b"top secret"
    main_files, dev_files = hub.repo_files(repo_id), hub.repo_files(repo_id, revision="dev")
    check_downloads(paths, main_files, dev_files, hub.repo_files(repo_id, revision=main.oid))
    # the cache names blobs by ETag: git sha1 for regular files, sha256 for LFS files (X-Linked-Etag)
    assert Path(os.path.realpath(paths["config.json"])).name == git_blob_sha1(main_files["config.json"])
    assert Path(os.path.realpath(paths["sub/blob.dat"])).name == sha256(big)
    assert calls(hub, "HEAD", "/loopback-org/downloads/resolve/main/sub/blob.dat")

    served = len(hub.requests)
    offline = run_client(DOWNLOAD_CLIENT, hub.env(hf_home=hf_home, offline=True), "offline", *args)
    assert len(hub.requests) == served  # nothing reached the server
    assert offline["paths"] == paths
    check_downloads(offline["paths"], main_files, dev_files, hub.repo_files(repo_id, revision=main.oid))


def check_downloads(paths: dict, main_files: dict, dev_files: dict, sha_files: dict) -> None:
    for name in ("config.json", "sub/blob.dat", "weights.safetensors"):
        assert Path(paths[name]).read_bytes() == main_files[name], name
    assert Path(paths["dev:config.json"]).read_bytes() == b'{"hidden_size": 16}\n'
    assert Path(paths["dev:dev.txt"]).read_bytes() == b"dev"
    assert Path(paths["sha:config.json"]).read_bytes() == sha_files["config.json"]
    for key, expected in (("snapshot:main", main_files), ("snapshot:dev", dev_files)):
        root = Path(paths[key])
        got = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        assert got == expected, key
    assert "later.txt" in main_files and "later.txt" not in sha_files


def test_auth_401_private_repos_and_no_token_in_records(api, hub):
    public = api.create_repo("loopback-org/open").repo_id
    api.upload_file(path_or_fileobj=b"data", path_in_repo="f.txt", repo_id=public)
    private = api.create_repo("loopback-org/closed", private=True).repo_id
    anonymous = HfApi(endpoint=hub.endpoint, token=False)
    wrong = HfApi(endpoint=hub.endpoint, token="hf_wrong_token")

    for write in (
        lambda: anonymous.create_repo("loopback-org/new"),
        lambda: anonymous.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=public),
        lambda: wrong.list_repo_files(public),
    ):
        with pytest.raises(HfHubHTTPError) as denied:
            write()
        assert denied.value.response.status_code == 401
    assert not api.repo_exists("loopback-org/new") and "x.txt" not in hub.repo_files(public)

    assert anonymous.list_repo_files(public) == [".gitattributes", "f.txt"]  # public: readable without a token
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info(private)
    assert not anonymous.repo_exists(private) and api.repo_exists(private)
    assert api.model_info(private).private is True

    # A client putting the token in the URL: the record keeps the request but not the token.
    url = f"{hub.endpoint}/api/whoami-v2?access_token={hub.token}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {hub.token}"})
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read())["name"] == hub.user
    assert ("GET", "/api/whoami-v2?access_token=***", 200) in hub.requests
    assert any(r.status == 200 and r.method == "POST" for r in hub.requests)  # authorized writes were recorded
    assert hub.token not in repr(hub.requests)


TRANSFORMERS_CLIENT = """
import json, sys
from safetensors.torch import save_file
from transformers import AutoModel

model = AutoModel.from_pretrained(sys.argv[1])
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, sys.argv[2])
print(json.dumps({"class": type(model).__name__}))
"""


@pytest.mark.slow
def test_transformers_push_to_hub_then_from_pretrained_in_subprocess(hub, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64,
    )  # fmt: skip
    model = BertModel(config).eval()
    commit = model.push_to_hub("loopback-org/tiny-bert", token=hub.token)  # in-process, via hub.in_process()
    assert commit.oid == HfApi(endpoint=hub.endpoint, token=hub.token).model_info("loopback-org/tiny-bert").sha
    assert {"config.json", "model.safetensors", "README.md"} <= set(hub.repo_files("loopback-org/tiny-bert"))
    assert calls(hub, "PUT", "/lfs-upload/")  # model.safetensors went through LFS

    out = tmp_path / "loaded.safetensors"
    result = run_client(TRANSFORMERS_CLIENT, hub.env(hf_home=tmp_path / "hf_home"), "loopback-org/tiny-bert", str(out))
    assert result["class"] == "BertModel"
    loaded, expected = load_file(out), model.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
