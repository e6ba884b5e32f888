"""A loopback Hugging Face Hub for tests: the subset of the Hub's HTTP API that huggingface_hub 2.x uses.

No installable package provides the Hub's upload endpoints, so tests start this small server on
127.0.0.1 (free port, daemon thread), point huggingface_hub / transformers at it, and stop it again.
Everything is kept in memory and dropped on ``stop()``.

    from hub_server import LoopbackHub

    with LoopbackHub(token="hf_test_token") as hub:
        # 1. In-process: pass the endpoint explicitly, inside ``hub.in_process()``. That context lifts the
        #    offline mode tests/conftest.py sets, disables Xet (the server speaks only the classic LFS protocol)
        #    and points ``huggingface_hub.constants.ENDPOINT`` (so transformers' ``push_to_hub``) at the hub.
        with hub.in_process():
            api = HfApi(endpoint=hub.endpoint, token=hub.token)
            api.create_repo("org/model")
        # 2. Subprocess: ``hub.env(hf_home=...)`` gives os.environ plus HF_ENDPOINT, HF_HUB_DISABLE_XET=1, ... (and
        #    without HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE); these must be set BEFORE huggingface_hub is imported.
        subprocess.run([sys.executable, "-c", code], env=hub.env(hf_home=tmp_path / "hf", token=True), check=True)
        assert [r for r in hub.requests if r.method == "PUT" and r.path.startswith("/lfs-upload/")]

Endpoints (``{type}s``: ``models``, ``datasets`` or ``spaces``; ``{prefix}``: ``""``, ``datasets/`` or ``spaces/``;
``{rev}``: a branch, a tag, ``refs/pr/N`` (sent URL-encoded: ``refs%2Fpr%2FN``) or a commit sha):

    GET    /api/whoami-v2                          the token's user (401 without a token)
    GET    /api/agent-harnesses                    empty registry (huggingface_hub asks for its user-agent)
    POST   /api/validate-yaml                      always valid (asked before a README.md is committed)
    POST   /api/repos/create                       json name, organization, type, visibility; 409 (+ url) if it exists
    DELETE /api/repos/delete                       json name, organization, type
    GET    /api/{type}s/{repo_id}[/revision/{rev}] id, sha, private, siblings [{rfilename, ?blobs=1: size, blobId, lfs}]
    GET    /api/{type}s/{repo_id}/tree/{rev}[/{path}]  ?recursive=&cursor=; a JSON list, next page in a Link header
    POST   /api/{type}s/{repo_id}/paths-info/{rev} form paths=...: entries of those that exist
    GET    /api/{type}s/{repo_id}/refs             branches, tags, converts (+ pullRequests with ?include_prs=1)
    GET    /api/{type}s/{repo_id}/commits/{rev}    first-parent history
    POST   /api/{type}s/{repo_id}/preupload/{rev}  uploadMode "lfs" (size > lfs_threshold or lfs_patterns) or "regular"
    POST   /api/{type}s/{repo_id}/commit/{rev}     NDJSON: header, file, lfsFile, deletedFile/Folder; ?create_pr=1
    POST   /api/{type}s/{repo_id}/branch/{name}    json startingPoint (default: main); DELETE removes the branch
    POST   /api/{type}s/{repo_id}/tag/{rev}        json tag, message; DELETE /tag/{tag} removes the tag
    POST   /{prefix}{repo_id}.git/info/lfs/objects/batch   basic transfer: upload + verify hrefs per missing object
    PUT    /lfs-upload/{ticket}                    the upload href (pre-signed like S3: no auth); checks sha256 and size
    POST   /{prefix}{repo_id}.git/info/lfs/objects/verify  json oid, size
    HEAD, GET /{prefix}{repo_id}/resolve/{rev}/{path}  X-Repo-Commit, ETag (git sha1; LFS: sha256), for LFS files
                                                   X-Linked-Etag and X-Linked-Size; Content-Length; Range

Auth: writes need ``Authorization: Bearer <token>`` (401 JSON error otherwise); a wrong token is a 401 on every
request; public repos are readable without a token, private ones answer 404 ``X-Error-Code: RepoNotFound``
without it. Errors carry ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound) and ``X-Error-Message``
so huggingface_hub raises its specific exceptions. The token owns every namespace. Each request is recorded in
``hub.requests`` as ``HubRequest(method, path, status)`` (path with query string, the token scrubbed out); no
header is ever recorded or logged. Unexpected server errors (500) are kept in ``hub.errors``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import fnmatch
import hashlib
import hmac
import http.server
import json
import os
import re
import secrets
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

DEFAULT_LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub refuses regular (non-LFS) files above 10 MB
DEFAULT_LFS_PATTERNS = (
    "*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.onnx", "*.msgpack", "*.npy", "*.npz",
    "*.pkl", "*.pickle", "*.joblib", "*.model", "*.arrow", "*.parquet", "*.gz", "*.zip", "*.tar", "*.zst",
)  # fmt: skip
_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_PR_REF = re.compile(r"refs/pr/(\d+)")


class HubRequest(NamedTuple):
    method: str
    path: str  # as sent (percent-encoded), with the query string
    status: int


class HubError(Exception):
    """An error answer: JSON ``{"error": message, **extra}`` plus the Hub's X-Error-* headers."""

    def __init__(self, status: int, message: str, code: str | None = None, headers=None, extra=None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.extra = dict(headers or {}), dict(extra or {})


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (what the Hub reports as a regular file's oid / ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class _File:
    sha256: str  # key of the content in LoopbackHub._blobs
    size: int
    lfs: bool
    git_oid: str  # sha1 of the blob git stores: the content, or the LFS pointer file

    @classmethod
    def of_lfs(cls, sha256: str, size: int) -> _File:
        return cls(sha256, size, True, git_blob_sha1(lfs_pointer(sha256, size)))

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid

    @property
    def lfs_info(self) -> dict:
        return {"size": self.size, "pointerSize": len(lfs_pointer(self.sha256, self.size))}


@dataclass
class _Commit:
    oid: str
    parent: str | None
    title: str
    message: str
    date: str
    files: dict[str, _File]


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: str = field(default_factory=_now)
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    prs: dict[int, str] = field(default_factory=dict)
    lfs_oids: set[str] = field(default_factory=set)

    @property
    def url_path(self) -> str:
        return _PREFIXES[self.repo_type] + self.repo_id


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LoopbackHub/1.0"
    timeout = 30  # idle keep-alive connections give their thread back
    hub: LoopbackHub  # set on the subclass LoopbackHub.start() builds

    def log_message(self, format, *args):  # never print requests (nor anything derived from their headers)
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body()
            status, headers, payload = self.hub._handle(method, self.path, self.headers, body)
        except json.JSONDecodeError as e:
            status, headers, payload = 400, {"X-Error-Message": "Malformed JSON body"}, {"error": str(e)}
        except HubError as e:
            headers = {"X-Error-Message": e.message, **e.headers}
            if e.code:
                headers["X-Error-Code"] = e.code
            status, payload = e.status, {"error": e.message, **e.extra}
        except Exception:  # noqa: BLE001 - a bug in the server: answer 500 and keep the traceback for the test to show
            self.hub.errors.append(f"{method} {self.hub._scrub(self.path)}\n{traceback.format_exc()}")
            status, headers, payload = 500, {}, {"error": "loopback hub internal error"}
        self.hub._record(method, self.path, status)
        if isinstance(payload, (dict, list)):
            data = json.dumps(payload).encode()
            headers.setdefault("Content-Type", "application/json; charset=utf-8")
        else:
            data = payload or b""
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)


class LoopbackHub:
    """An in-memory Hub on ``127.0.0.1:<free port>``. Use as a context manager, or call ``start()``/``stop()``.

    Args:
        token: the only valid token (``Authorization: Bearer <token>``); it owns every namespace.
        user: the token's user name (``whoami``; namespace of repos created without one).
        lfs_threshold: files larger than this many bytes are uploaded through LFS (the Hub: 10 MB).
        lfs_patterns: file-name patterns always uploaded through LFS (as the Hub's default .gitattributes).
        page_size: tree entries per page (the Hub: 1000); further pages are linked with ``Link: <...>; rel="next"``.
    """

    def __init__(
        self,
        token: str = "hf_test_token",
        *,
        user: str = "loopback-user",
        lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
        lfs_patterns: tuple[str, ...] = DEFAULT_LFS_PATTERNS,
        page_size: int = 1000,
    ):
        self.token, self.user = token, user
        self.lfs_threshold, self.lfs_patterns, self.page_size = lfs_threshold, tuple(lfs_patterns), page_size
        self.endpoint: str | None = None
        self.requests: list[HubRequest] = []
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._blobs: dict[str, bytes] = {}  # sha256 -> content, for regular and LFS files alike
        self._tickets: dict[str, tuple[_Repo, str, int]] = {}  # LFS upload href ticket -> (repo, oid, size)
        self._counter = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._server is None:
            handler = type("_BoundHandler", (_Handler,), {"hub": self})
            self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            self._server.daemon_threads = True
            self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="loopback-hub", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None
        with self._lock:
            self._repos.clear()
            self._blobs.clear()
            self._tickets.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- pointing clients at the hub --------------------------------------------------------------------------
    def env(self, hf_home=None, *, token: bool = False, offline: bool = False, base=None) -> dict[str, str]:
        """Environment for a client subprocess: ``base`` (default os.environ) with the Hub pointed here.

        Sets HF_ENDPOINT, HF_HUB_DISABLE_XET=1, HF_HUB_DISABLE_TELEMETRY=1, HF_HUB_DISABLE_PROGRESS_BARS=1 and NO_PROXY;
        drops HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE and any HF_TOKEN. ``hf_home`` sets HF_HOME (and drops the cache
        overrides), ``token=True`` exports HF_TOKEN=<token>, ``offline=True`` sets HF_HUB_OFFLINE=1.
        """
        env = dict(os.environ if base is None else base)
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            env.pop(key, None)
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_HUB_DISABLE_XET="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        if hf_home is not None:
            for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_XET_CACHE"):
                env.pop(key, None)
            env["HF_HOME"] = str(hf_home)
        if token:
            env["HF_TOKEN"] = self.token
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        return env

    @contextlib.contextmanager
    def in_process(self):
        """Point the already-imported huggingface_hub of this process at the hub, restoring everything on exit.

        Patches ``huggingface_hub.constants``: ENDPOINT (+ the resolve-URL template), HF_HUB_OFFLINE=False,
        HF_HUB_DISABLE_XET=True, HF_HUB_DISABLE_TELEMETRY=True, and drops transformers' cached ``HfApi`` (it captures
        ENDPOINT on first use). Prefer ``HfApi(endpoint=hub.endpoint, token=hub.token)`` and ``endpoint=`` arguments.
        """
        from huggingface_hub import constants

        patch = {
            "ENDPOINT": self.endpoint,
            "HUGGINGFACE_CO_URL_TEMPLATE": self.endpoint + "/{repo_id}/resolve/{revision}/{filename}",
            "HF_HUB_OFFLINE": False,
            "HF_HUB_DISABLE_XET": True,
            "HF_HUB_DISABLE_TELEMETRY": True,
        }
        saved = {name: getattr(constants, name) for name in patch}
        transformers_hub = sys.modules.get("transformers.utils.hub")
        try:
            for name, value in patch.items():
                setattr(constants, name, value)
            if transformers_hub is not None:
                transformers_hub._hf_api = None
            yield self
        finally:
            for name, value in saved.items():
                setattr(constants, name, value)
            if transformers_hub is not None:
                transformers_hub._hf_api = None

    # ---- introspection for tests ------------------------------------------------------------------------------
    def repo_files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """The files of a repo at a revision, read from the server's state (bypassing HTTP)."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            files = repo.commits[self._resolve(repo, revision)].files
            return {path: self._blobs[f.sha256] for path, f in files.items()}

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "***").replace(quote(self.token, safe=""), "***") if self.token else text

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append(HubRequest(method, self._scrub(path), status))

    # ---- routing ----------------------------------------------------------------------------------------------
    def _handle(self, method: str, target: str, headers, body: bytes):
        split = urlsplit(target)
        query = parse_qs(split.query)
        segs = [unquote(s) for s in split.path.split("/")[1:]]  # split first: "refs%2Fpr%2F1" stays one segment
        with self._lock:
            authed = self._authenticate(headers)
            if segs[0] == "api":
                return self._api(method, segs[1:], query, body, authed, split.path)
            if segs[0] == "lfs-upload" and len(segs) == 2 and method == "PUT":
                return self._lfs_put(segs[1], body)
            repo_type, rest = "model", segs
            if segs[0] in ("datasets", "spaces") and len(segs) > 3:
                repo_type, rest = segs[0][:-1], segs[1:]
            if len(rest) >= 4 and rest[2] == "resolve" and method in ("GET", "HEAD"):
                repo = self._repo(repo_type, f"{rest[0]}/{rest[1]}", authed)
                return self._resolve_file(repo, rest[3], "/".join(rest[4:]), headers)
            if len(rest) == 6 and rest[1].endswith(".git") and rest[2:5] == ["info", "lfs", "objects"]:
                self._require_write(authed)
                repo = self._repo(repo_type, f"{rest[0]}/{rest[1][:-4]}", authed)
                if rest[5] == "batch" and method == "POST":
                    return self._lfs_batch(repo, json.loads(body or b"{}"))
                if rest[5] == "verify" and method == "POST":
                    return self._lfs_verify(repo, json.loads(body or b"{}"))
        raise HubError(404, f"Not found: {method} {split.path}")

    def _authenticate(self, headers) -> bool:
        value = headers.get("Authorization")
        if value is None:
            return False
        scheme, _, given = value.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise HubError(401, "Invalid credentials in Authorization header")
        return True

    @staticmethod
    def _require_write(authed: bool) -> None:
        if not authed:
            raise HubError(401, "You must be authenticated (Authorization: Bearer <token>) to do this")

    def _repo(self, repo_type: str, repo_id: str, authed: bool) -> _Repo:
        repo = self._repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not authed):
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return repo

    def _resolve(self, repo: _Repo, revision: str) -> str:
        rev = revision.removeprefix("refs/heads/")
        if rev in repo.branches:
            return repo.branches[rev]
        if (m := _PR_REF.fullmatch(revision)) and int(m[1]) in repo.prs:
            return repo.prs[int(m[1])]
        if revision.removeprefix("refs/tags/") in repo.tags:
            return repo.tags[revision.removeprefix("refs/tags/")]
        if revision in repo.commits:
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")

    def _api(self, method: str, segs: list[str], query, body: bytes, authed: bool, raw_path: str):
        if segs == ["whoami-v2"] and method == "GET":
            self._require_write(authed)
            return 200, {}, self._whoami()
        if segs == ["agent-harnesses"] and method == "GET":
            return 200, {}, {"standardEnvVars": [], "harnesses": {}}
        if segs == ["validate-yaml"] and method == "POST":
            return 200, {}, {"errors": [], "warnings": []}
        if segs[:1] == ["repos"] and len(segs) == 2:
            self._require_write(authed)
            payload = json.loads(body or b"{}")
            if segs[1] == "create" and method == "POST":
                return self._create_repo(payload)
            if segs[1] == "delete" and method == "DELETE":
                repo_id = f"{payload.get('organization') or self.user}/{payload.get('name')}"
                self._repo(payload.get("type") or "model", repo_id, authed)
                del self._repos[(payload.get("type") or "model", repo_id)]
                return 200, {}, {}
        if len(segs) >= 3 and segs[0] in ("models", "datasets", "spaces"):
            repo_type, repo_id, rest = segs[0][:-1], f"{segs[1]}/{segs[2]}", segs[3:]
            action = rest[0] if rest else ""
            if method != "GET" and action != "paths-info":
                self._require_write(authed)
            repo = self._repo(repo_type, repo_id, authed)
            if method == "GET" and not rest:
                return 200, {}, self._info(repo, "main", query)
            if method == "GET" and action == "revision" and len(rest) == 2:
                return 200, {}, self._info(repo, rest[1], query)
            if method == "GET" and action == "tree" and len(rest) >= 2:
                return self._tree(repo, rest[1], "/".join(rest[2:]), query, raw_path)
            if method == "GET" and action == "refs" and len(rest) == 1:
                return 200, {}, self._refs(repo, query)
            if method == "GET" and action == "commits" and len(rest) == 2:
                return 200, {}, self._commits(repo, rest[1])
            if method == "POST" and action == "paths-info" and len(rest) == 2:
                return 200, {}, self._paths_info(repo, rest[1], parse_qs(body.decode()))
            if method == "POST" and action == "preupload" and len(rest) == 2:
                return 200, {}, self._preupload(repo, rest[1], json.loads(body or b"{}"))
            if method == "POST" and action == "commit" and len(rest) == 2:
                return 200, {}, self._commit(repo, rest[1], query, body)
            if action in ("branch", "tag") and len(rest) == 2 and method in ("POST", "DELETE"):
                return 200, {}, self._ref_change(repo, action, method, rest[1], json.loads(body or b"{}"))
        raise HubError(404, f"Not found: {method} /api/{'/'.join(segs)}")

    # ---- repos, info, listings ---------------------------------------------------------------------------------
    def _whoami(self) -> dict:
        return {
            "type": "user", "id": hashlib.sha1(self.user.encode()).hexdigest()[:24], "name": self.user,
            "fullname": self.user, "email": f"{self.user}@loopback.invalid", "emailVerified": True,
            "canPay": False, "isPro": False, "orgs": [],
            "auth": {"type": "access_token", "accessToken": {"displayName": "loopback", "role": "write"}},
        }  # fmt: skip

    def _create_repo(self, payload: dict):
        name, org = payload.get("name") or "", payload.get("organization") or self.user
        repo_type = payload.get("type") or "model"
        if repo_type not in _PREFIXES or not _NAME.fullmatch(name) or not _NAME.fullmatch(org):
            raise HubError(400, f"Invalid repo name or type: {org}/{name} ({repo_type})")
        private = payload.get("visibility") == "private" or payload.get("private") is True
        repo = _Repo(repo_type, f"{org}/{name}", private)
        url = f"{self.endpoint}/{repo.url_path}"
        if (repo_type, repo.repo_id) in self._repos:
            raise HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
        gitattributes = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in self.lfs_patterns)
        files = {".gitattributes": self._store(gitattributes.encode(), lfs=False)}
        repo.branches["main"] = self._new_commit(repo, None, "initial commit", "", files)
        self._repos[(repo_type, repo.repo_id)] = repo
        return 200, {}, {"url": url, "name": repo.repo_id}

    def _info(self, repo: _Repo, revision: str, query) -> dict:
        commit = repo.commits[self._resolve(repo, revision)]
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path, f in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=f.size, blobId=f.git_oid)
                if f.lfs:
                    sibling["lfs"] = {"sha256": f.sha256, **f.lfs_info}
            siblings.append(sibling)
        return {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0], "sha": commit.oid, "private": repo.private, "gated": False,
            "disabled": False, "createdAt": repo.created_at, "lastModified": commit.date, "tags": [],
            "downloads": 0, "likes": 0, "siblings": siblings,
        }  # fmt: skip

    def _entry(self, files: dict[str, _File], path: str) -> dict | None:
        """Tree / paths-info entry of ``path``: a file, a directory (some file below it) or None."""
        if path in files:
            f = files[path]
            entry = {"type": "file", "oid": f.git_oid, "size": f.size, "path": path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, **f.lfs_info}
            return entry
        below = sorted((p, f.git_oid) for p, f in files.items() if p.startswith(path + "/"))
        if not below:
            return None
        return {"type": "directory", "oid": hashlib.sha1(repr(below).encode()).hexdigest(), "size": 0, "path": path}

    def _tree(self, repo: _Repo, revision: str, path: str, query, raw_path: str):
        oid = self._resolve(repo, revision)
        files, path = repo.commits[oid].files, path.strip("/")
        base = path + "/" if path else ""
        if path and (path in files or self._entry(files, path) is None):
            raise HubError(404, f"No folder {path} at {revision}", code="EntryNotFound", headers={"X-Repo-Commit": oid})
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        paths: set[str] = set()
        for p in files:
            if p.startswith(base):
                parts = p[len(base) :].split("/")
                depths = range(1, len(parts) + 1) if recursive else [1]
                paths.update(base + "/".join(parts[:depth]) for depth in depths)
        entries = sorted((self._entry(files, p) for p in paths), key=lambda e: (e["type"] != "directory", e["path"]))
        cursor = int(query.get("cursor", ["0"])[0])
        page, headers = entries[cursor : cursor + self.page_size], {"X-Repo-Commit": oid}
        if cursor + self.page_size < len(entries):
            params = {k: v[0] for k, v in query.items() if k != "cursor"} | {"cursor": cursor + self.page_size}
            headers["Link"] = f'<{self.endpoint}{raw_path}?{urlencode(params)}>; rel="next"'
        return 200, headers, page

    def _paths_info(self, repo: _Repo, revision: str, form) -> list:
        files = repo.commits[self._resolve(repo, revision)].files
        entries = (self._entry(files, p.strip("/")) for p in form.get("paths", []))
        return [e for e in entries if e is not None]

    def _refs(self, repo: _Repo, query) -> dict:
        def ref(name: str, full: str, oid: str) -> dict:
            return {"name": name, "ref": full, "targetCommit": oid}

        refs = {
            "branches": [ref(b, f"refs/heads/{b}", oid) for b, oid in repo.branches.items()],
            "converts": [],
            "tags": [ref(t, f"refs/tags/{t}", oid) for t, oid in repo.tags.items()],
        }
        if query.get("include_prs", ["0"])[0].lower() in ("1", "true"):
            refs["pullRequests"] = [ref(f"refs/pr/{n}", f"refs/pr/{n}", oid) for n, oid in repo.prs.items()]
        return refs

    def _commits(self, repo: _Repo, revision: str) -> list:
        out, oid = [], self._resolve(repo, revision)
        while oid is not None:
            c = repo.commits[oid]
            authors = [{"user": self.user}]
            out.append({"id": c.oid, "title": c.title, "message": c.message, "authors": authors, "date": c.date})
            oid = c.parent
        return out

    # ---- writes ---------------------------------------------------------------------------------------------------
    def _store(self, data: bytes, *, lfs: bool) -> _File:
        sha256 = hashlib.sha256(data).hexdigest()
        self._blobs[sha256] = data
        return _File.of_lfs(sha256, len(data)) if lfs else _File(sha256, len(data), False, git_blob_sha1(data))

    def _new_commit(self, repo: _Repo, parent: str | None, title: str, message: str, files: dict) -> str:
        self._counter += 1
        seed = f"{repo.repo_id}\n{parent}\n{title}\n{self._counter}\n{secrets.token_hex(8)}"
        oid = hashlib.sha1(seed.encode()).hexdigest()
        repo.commits[oid] = _Commit(oid, parent, title, message, _now(), dict(files))
        return oid

    def _preupload(self, repo: _Repo, revision: str, payload: dict) -> dict:
        files = repo.commits[self._resolve(repo, revision)].files
        out = []
        for item in payload.get("files", []):
            path, size = item["path"], int(item["size"])
            name = path.rsplit("/", 1)[-1]
            lfs = size > self.lfs_threshold or any(fnmatch.fnmatch(name, pattern) for pattern in self.lfs_patterns)
            remote = files.get(path)  # its oid lets the client skip unchanged files (sha256 for LFS, else git sha1)
            oid = None if remote is None else (remote.sha256 if remote.lfs else remote.git_oid)
            out.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        return {"files": out}

    def _commit(self, repo: _Repo, revision: str, query, body: bytes) -> dict:
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next((line["value"] for line in lines if line.get("key") == "header"), {})
        create_pr = query.get("create_pr", ["0"])[0].lower() in ("1", "true")
        base = self._resolve(repo, revision)
        branch = revision.removeprefix("refs/heads/")
        pr = _PR_REF.fullmatch(revision)
        if not create_pr and not pr and branch not in repo.branches:
            raise HubError(400, f"Can only commit to a branch or a pull request, not to '{revision}'")
        if header.get("parentCommit") and header["parentCommit"] != base:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        files = dict(repo.commits[base].files)
        for line in lines:
            key, value = line.get("key"), line.get("value") or {}
            path = value.get("path", "")
            if key != "header" and (not path or path.startswith("/") or ".." in path.split("/")):
                raise HubError(400, f"Invalid path in commit: {path!r}")
            if key == "file":
                files[path] = self._store(base64.b64decode(value["content"]), lfs=False)
            elif key == "lfsFile":
                oid = value["oid"]
                if oid not in repo.lfs_oids or ("size" in value and int(value["size"]) != len(self._blobs[oid])):
                    raise HubError(422, f"LFS object {oid} of {path} is not in this repo (or has another size)")
                files[path] = _File.of_lfs(oid, len(self._blobs[oid]))
            elif key == "deletedFile":
                if files.pop(path, None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", code="EntryNotFound")
            elif key == "deletedFolder":
                below = [p for p in files if p.startswith(path.rstrip("/") + "/")]
                if not below:
                    raise HubError(404, f"A folder with this name doesn't exist: {path}", code="EntryNotFound")
                for p in below:
                    del files[p]
            elif key != "header":
                raise HubError(400, f"Unknown commit operation key: {key!r}")
        oid = self._new_commit(repo, base, header.get("summary") or "", header.get("description") or "", files)
        result = {"success": True, "commitOid": oid, "commitUrl": f"{self.endpoint}/{repo.url_path}/commit/{oid}"}
        if create_pr:
            number = max(repo.prs, default=0) + 1
            repo.prs[number] = oid
            result["pullRequestUrl"] = f"{self.endpoint}/{repo.url_path}/discussions/{number}"
        elif pr:
            repo.prs[int(pr[1])] = oid
        else:
            repo.branches[branch] = oid
        return result

    def _ref_change(self, repo: _Repo, kind: str, method: str, name: str, payload: dict) -> dict:
        refs = repo.branches if kind == "branch" else repo.tags
        if method == "DELETE":
            if name not in refs:
                raise HubError(404, f"Invalid rev id: {name}", code="RevisionNotFound")
            if kind == "branch" and name == "main":
                raise HubError(403, "Cannot delete the default branch")
            del refs[name]
            return {}
        if kind == "tag":  # POST /tag/{revision} {"tag": name}
            name, start = payload.get("tag") or "", name
        else:  # POST /branch/{name} {"startingPoint": revision}
            start = payload.get("startingPoint") or "main"
        if not name or name.startswith("refs/") or name in refs:
            status = 409 if name in refs else 400
            raise HubError(status, f"Invalid or existing {kind} name: {name!r}")
        refs[name] = self._resolve(repo, start)
        return {}

    # ---- LFS -------------------------------------------------------------------------------------------------------
    def _lfs_batch(self, repo: _Repo, payload: dict):
        if payload.get("operation") != "upload":
            raise HubError(400, "The loopback hub only supports the LFS 'upload' operation")
        objects = []
        for obj in payload.get("objects", []):
            oid, size = obj.get("oid"), obj.get("size")
            if not (isinstance(oid, str) and re.fullmatch("[0-9a-f]{64}", oid) and isinstance(size, int) and size >= 0):
                error = {"code": 422, "message": "invalid oid or size"}
                objects.append({"oid": str(oid), "size": size if isinstance(size, int) else 0, "error": error})
            elif oid in repo.lfs_oids:
                objects.append({"oid": oid, "size": size})  # already there: no actions, the client skips it
            else:
                ticket = secrets.token_urlsafe(16)
                self._tickets[ticket] = (repo, oid, size)
                verify = f"{self.endpoint}/{repo.url_path}.git/info/lfs/objects/verify"
                objects.append({
                    "oid": oid, "size": size, "authenticated": True,
                    "actions": {
                        "upload": {"href": f"{self.endpoint}/lfs-upload/{ticket}", "header": {}, "expires_in": 3600},
                        "verify": {"href": verify, "header": {}},
                    },
                })  # fmt: skip
        answer = {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}
        return 200, {"Content-Type": "application/vnd.git-lfs+json"}, answer

    def _lfs_put(self, ticket: str, body: bytes):
        if ticket not in self._tickets:
            raise HubError(403, "Unknown or already used upload ticket")
        repo, oid, size = self._tickets.pop(ticket)
        if len(body) != size or hashlib.sha256(body).hexdigest() != oid:
            raise HubError(400, f"Uploaded content does not match oid {oid} and size {size}")
        self._blobs[oid] = body
        repo.lfs_oids.add(oid)
        return 200, {"ETag": f'"{oid}"'}, b""

    def _lfs_verify(self, repo: _Repo, payload: dict):
        oid, size = payload.get("oid"), payload.get("size")
        if oid not in repo.lfs_oids or len(self._blobs[oid]) != size:
            raise HubError(404, f"LFS object {oid} not found")
        return 200, {}, {"success": True}

    # ---- downloads --------------------------------------------------------------------------------------------------
    def _resolve_file(self, repo: _Repo, revision: str, path: str, request_headers):
        oid = self._resolve(repo, revision)
        f = repo.commits[oid].files.get(path)
        if f is None:
            raise HubError(404, "Entry not found", code="EntryNotFound", headers={"X-Repo-Commit": oid})
        data = self._blobs[f.sha256]
        headers = {"X-Repo-Commit": oid, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"}
        headers["Content-Type"] = "application/octet-stream"
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", request_headers.get("Range", "").strip())
        if m and (m[1] or m[2]):  # "a-b", "a-" or the suffix form "-n"
            last = len(data) - 1
            start, end = (int(m[1]), int(m[2] or last)) if m[1] else (max(len(data) - int(m[2]), 0), last)
            if start >= len(data):
                return 416, {**headers, "Content-Range": f"bytes */{len(data)}"}, b""
            end = min(end, len(data) - 1)
            return 206, {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}, data[start : end + 1]
        return 200, headers, data
