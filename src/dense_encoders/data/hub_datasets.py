"""Datasets named by Hub id: the one place where a dataset argument (``evaluate MODEL DATA``, ``encode``,
``score-teacher --data``, ``distill --corpus``, ``layerwise --data``, ``infuse --train-data``, ``pretrain
--corpus``) becomes files.

:func:`resolve_dataset` gives a local path that exists as it is (it always wins over a Hub id of the same
spelling); anything else of the form ``namespace/name`` is a dataset repository on the Hugging Face Hub, read in
one of two layouts (:func:`hub_dataset_files`):

* BEIR's (``BeIR/scifact``): the repository holds ``corpus.jsonl.gz`` and ``queries.jsonl.gz``; the judgements
  are in the companion repository ``BeIR/scifact-qrels``, one ``<split>.tsv`` per split;
* MTEB's (``mteb/scifact``): one repository with the corpus, the queries and a ``qrels/`` folder, as JSON lines
  and tab-separated files (``corpus.jsonl``, ``qrels/test.tsv``) or as the Parquet shards of its ``corpus``,
  ``queries`` and ``default`` configurations (``corpus/*.parquet``, ``qrels/test-00000-of-00001.parquet``).

Either part may be gzip-compressed (``.gz``). Only the files a command needs are downloaded, through
``huggingface_hub.snapshot_download`` into its cache (``HF_HOME``), at ``revision`` (``--dataset-revision``: a
branch, tag or commit; default ``main``); the commit it resolves to is recorded (:attr:`DatasetFiles.hub`) in the
results JSON, the embedding manifest and the model card. Offline (``HF_HUB_OFFLINE=1``, or the Hub out of reach)
the files come from the cache. Every failure is one line: an unknown repository or revision, a repository in
neither layout (naming what was looked for), a split without judgements, nothing cached without a network.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path

from .format import GZIP_SUFFIX, HF_URL_PREFIX, data_suffix

PARTS = ("corpus", "queries", "qrels")
QRELS_COMPANION_SUFFIX = "-qrels"
REVISION_FLAG = "--dataset-revision"  # the flag of every command that takes a dataset (settings/datasets.py)
# a name of this form is a Hub dataset when no local path of that spelling exists
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
# names that are files a reader brings, never Hub ids (``out/train.jsonl`` is a missing file, not a repository)
_FILE_SUFFIXES = (".jsonl", ".json", ".tsv", ".txt", ".csv", ".parquet", ".trec", ".run", ".yaml", ".yml")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# what no branch or tag name holds (git check-ref-format), so that none is a path out of the cache's refs/ folder
_NOT_IN_REF = tuple((re.compile(pattern), what) for pattern, what in (
    (r"\.\.", "holds '..'"), (r"\\", "holds a backslash"), (r"^/", "starts with '/'"), (r"/$", "ends with '/'"),
    (r"//", "holds '//'"), (r"(?:^|/)\.", "has a part starting with '.'"), (r"\.$", "ends with '.'"),
    (r"\.lock(?:/|$)", "has a part ending in '.lock'"), (r"@\{", "holds '@{'"),
    (r"[\x00-\x20\x7f]", "holds a space or control character"), (r"[~^:?*\[]", "holds any of ~^:?*["),
    (r"^@?$", "is empty or '@'")))
# a split's judgements: test.tsv, test.tsv.gz, test.jsonl, test.parquet or test-00000-of-00001.parquet
_QRELS_FILE = re.compile(r"(?P<split>.+?)(?:-\d{5}-of-\d{5})?\.(?:tsv|jsonl|parquet)(?:\.gz)?", re.IGNORECASE)
LOOKED_FOR = ("corpus.jsonl[.gz] or corpus/*.parquet, queries.jsonl[.gz] or queries/*.parquet; the judgements in "
              "qrels/<split>.tsv[.gz] or qrels/<split>-*.parquet (MTEB) or in the companion repository "
              "<id>-qrels as <split>.tsv[.gz] (BEIR)")


@dataclass(frozen=True)
class DatasetFiles:
    """The files of a retrieval dataset that a command reads, and where they come from.

    ``corpus_files`` / ``queries_files``: the part's JSON-lines or Parquet file, or its Parquet shards in name order
    (``hf://`` URLs when streamed from the Hub); ``qrels``: the judgement file(s) of ``split``. ``name``, ``source``
    (a folder, or ``hf://datasets/<id>@<commit>``) and, for a Hub dataset, ``hub``: ``repo_id``, ``revision`` (the
    commit), ``layout`` (``beir`` / ``mteb``) and, for BEIR's layout, ``qrels`` (the companion's ``repo_id`` and
    ``revision``)."""

    name: str
    source: str
    corpus_files: tuple[Path | str, ...] = ()
    queries_files: tuple[Path | str, ...] = ()
    qrels: tuple[Path, ...] = ()
    split: str | None = None
    hub: dict | None = field(default=None, compare=False)

    def part(self, name: str) -> Path | str | None:
        """What a reader of ``corpus`` or ``queries`` takes (:func:`~dense_encoders.data.format.records`): the file,
        or the folder of its downloaded Parquet shards; None when the part was not asked for."""
        files = self.corpus_files if name == "corpus" else self.queries_files
        if not files:
            return None
        if len(files) == 1:
            return files[0]
        if any(isinstance(f, str) for f in files):
            raise ValueError(f"the {name} of {self.source} is {len(files)} remote shards: read them one by one")
        return Path(files[0]).parent

    @property
    def corpus(self) -> Path | str | None:
        return self.part("corpus")

    @property
    def queries(self) -> Path | str | None:
        return self.part("queries")


def is_hub_dataset_id(text: str | Path) -> bool:
    """Whether ``text`` has the form of a Hub dataset id (``namespace/name``) rather than of a file a user brings
    (``out/train.jsonl``): only then is a path that does not exist looked up on the Hub."""
    text = str(text)
    return (_HUB_ID.fullmatch(text) is not None and ".." not in text and not text.endswith((".", "-"))
            and not text.lower().removesuffix(GZIP_SUFFIX).endswith(_FILE_SUFFIXES))


def resolve_dataset(argument: str | Path, *, revision: str | None = None, parts: tuple[str, ...] = PARTS,
                    split: str | None = "test", stream: bool = False) -> Path | DatasetFiles:
    """What a dataset argument names: a local path that exists (or any argument that is not of the form of a Hub
    id) as that ``Path``, for the caller's own readers; a Hub id as its :class:`DatasetFiles`
    (:func:`hub_dataset_files`). ``revision`` applies to Hub datasets only: given with a local path, it is an
    error."""
    path = Path(argument).expanduser()
    if path.exists() or not is_hub_dataset_id(argument):
        if revision is not None:
            raise ValueError(f"{REVISION_FLAG} {revision}: {argument} is a local path; a revision applies to a "
                             "dataset given by Hub id (namespace/name): leave it out")
        return path
    return hub_dataset_files(str(argument), revision=revision, parts=parts, split=split, stream=stream)


def names_hub_dataset(argument: str | Path | None) -> bool:
    """Whether ``argument`` names a Hub dataset: of the form ``namespace/name``, and no local path of that name."""
    return (argument is not None and not isinstance(argument, DatasetFiles) and is_hub_dataset_id(argument)
            and not Path(argument).expanduser().exists())


def revisions_for(arguments, revision: str | None) -> list[str | None]:
    """The revision of each of ``arguments`` (several datasets of one command: ``layerwise --data``, ``infuse
    --train-data`` and ``--eval-data``): ``revision`` for those that name a Hub dataset, None for local ones;
    an error when ``revision`` is given and none of them names a Hub dataset."""
    arguments = list(arguments)
    hub = [names_hub_dataset(argument) for argument in arguments]
    if revision is not None and not any(hub):
        raise ValueError(f"{REVISION_FLAG} {revision}: no dataset here is given by Hub id (namespace/name), and a "
                         "revision applies only to those: leave it out")
    return [revision if is_hub else None for is_hub in hub]


def check_revision(repo_id: str, revision: str | None) -> None:
    """Refuse, in one line, a ``revision`` of ``repo_id`` that is no branch, tag or commit name at all (git allows
    none with ``..``, a backslash, a leading, trailing or doubled ``/``, a part starting with ``.``, ...:
    ``../refs/main``). Checked before the Hub or the cache is asked, so that it is refused offline as online and
    never read as a path inside the cache; a name with ``/`` that can be a ref (``refs/pr/1``, ``release/v2``) is
    the Hub's to know, offline the cache's refs."""
    if revision is None:
        return
    for pattern, what in _NOT_IN_REF:
        if pattern.search(revision):
            raise ValueError(f"{REVISION_FLAG} {revision!r}: not a branch, tag or commit (no name of one {what}); "
                             f"give one of {repo_id}'s branches, tags or 40-hex commits, or leave {REVISION_FLAG} out "
                             "for main")


# ------------------------------------------------------------------------------------------------ the Hub


class NoSuchHubDataset(FileNotFoundError):
    """The Hub answers that it has no dataset repository of that id (or none this token may read)."""


@dataclass(frozen=True)
class _Listing:
    repo_id: str
    requested: str | None  # the revision asked for (None: main)
    revision: str  # the commit it resolved to
    files: tuple[str, ...]
    online: bool


def _hub():
    """huggingface_hub's client pieces, imported when a Hub dataset is named (``--help`` stays light)."""
    import huggingface_hub
    from huggingface_hub import constants, errors

    return huggingface_hub, constants, errors


def _cached_listing(repo_id: str, revision: str | None) -> _Listing | None:
    """The files of ``repo_id`` at ``revision`` that the Hugging Face cache holds (what earlier downloads fetched),
    or None when it holds none; read as the cache is laid out (``refs/<revision>`` names the commit,
    ``snapshots/<commit>/`` holds the files: huggingface_hub's cache guide). Not ``snapshot_download(...,
    local_files_only=True)``: it refuses a snapshot that lacks any file of the repository, and a command downloads
    only the files it reads."""
    _, constants, _ = _hub()
    storage = Path(constants.HF_HUB_CACHE) / ("datasets--" + repo_id.replace("/", "--"))
    commit = revision if revision and _COMMIT.fullmatch(revision) else None
    if commit is None:
        ref = storage / "refs" / (revision or "main")
        commit = ref.read_text().strip() if ref.is_file() else None
    snapshot = storage / "snapshots" / commit if commit else None
    if snapshot is None or not snapshot.is_dir():
        return None
    files = tuple(sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()))
    return _Listing(repo_id, revision, commit, files, online=False)


def _listing(repo_id: str, revision: str | None, *, argument: bool = True) -> _Listing:
    """The files of the Hub dataset ``repo_id`` at ``revision`` and the commit it resolves to: from the Hub, or
    offline (``HF_HUB_OFFLINE=1``, or the Hub out of reach) from the cache. One-line errors for an unknown repository
    or revision and for an uncached dataset without a network; ``argument``: ``repo_id`` is what the user gave
    (not a companion repository), so the errors also say that no local path has that name."""
    check_revision(repo_id, revision)  # before the Hub or the cache is asked: offline as online
    huggingface_hub, constants, errors = _hub()
    at = f"{repo_id}@{revision or 'main'}"
    no_path = "not a local path, and " if argument else ""
    reason = "offline (HF_HUB_OFFLINE=1)"
    if not constants.HF_HUB_OFFLINE:
        try:
            info = huggingface_hub.HfApi().dataset_info(repo_id, revision=revision)
            files = tuple(sorted(sibling.rfilename for sibling in info.siblings or ()))
            return _Listing(repo_id, revision, info.sha, files, online=True)
        except errors.RevisionNotFoundError:
            raise ValueError(f"{repo_id}: the Hub dataset has no revision {revision!r}; give one of its branches, "
                             f"tags or commits ({REVISION_FLAG}), or leave {REVISION_FLAG} out for main") from None
        except errors.GatedRepoError:
            raise ValueError(f"{repo_id}: the Hub dataset is gated; accept its conditions on its Hub page and log in "
                             "(`hf auth login`) first") from None
        except errors.RepositoryNotFoundError:
            raise NoSuchHubDataset(
                f"{repo_id}: {no_path}no dataset {repo_id} on the Hub ({constants.ENDPOINT}; a private one needs `hf "
                "auth login`); give a BEIR folder or the id of a Hub dataset (namespace/name)") from None
        except Exception as error:  # noqa: BLE001 - no network, a proxy, a Hub outage: fall back to the cache
            reason = f"the Hub is out of reach ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
    cached = _cached_listing(repo_id, revision)
    if cached is None:
        raise FileNotFoundError(
            f"{repo_id}: {no_path}{reason}, and the Hugging Face cache ({constants.HF_HUB_CACHE}) holds no copy of the "
            f"Hub dataset {at}; run once with a network, or give a BEIR folder")
    return cached


def _part_files(files: tuple[str, ...], part: str) -> list[str]:
    """The files of ``corpus`` or ``queries`` among a repository's ``files``: ``part.jsonl`` (or ``.jsonl.gz``), or
    the Parquet shards in ``part/`` (or its one JSON-lines file); empty when there are none."""
    for name in (f"{part}.jsonl", f"{part}.jsonl{GZIP_SUFFIX}"):
        if name in files:
            return [name]
    below = [f for f in files if f.startswith(part + "/") and "/" not in f[len(part) + 1:]]
    parquet = sorted(f for f in below if data_suffix(f) == ".parquet" and not f.lower().endswith(GZIP_SUFFIX))
    if parquet:
        return parquet
    lines = [f for f in below if data_suffix(f) == ".jsonl"]
    return lines if len(lines) == 1 else []


def _qrels_files(files: tuple[str, ...], folder: str, split: str) -> tuple[list[str], list[str]]:
    """``(files of split, every split)`` among the judgement files in ``folder`` (``qrels/`` or a repository's
    root): ``<split>.tsv[.gz]``, ``<split>.jsonl``, ``<split>.parquet`` or its shards
    ``<split>-00000-of-00002.parquet``."""
    by_split: dict[str, list[str]] = {}
    for name in files:
        if name.startswith(folder) and "/" not in name[len(folder):]:
            match = _QRELS_FILE.fullmatch(name[len(folder):])
            if match:
                by_split.setdefault(match["split"], []).append(name)
    chosen = by_split.get(split, [])
    if len({data_suffix(name) for name in chosen}) > 1:  # test.tsv beside test.parquet: the text file
        chosen = [name for name in chosen if data_suffix(name) == ".tsv"]
    return sorted(chosen), sorted(by_split)


def _download(listing: _Listing, files: list[str]) -> Path:
    """The snapshot folder of ``listing`` holding ``files``, downloaded into the cache by
    ``huggingface_hub.snapshot_download`` (only those files; at the revision asked for, so that the cache maps it to
    its commit for offline runs), or, offline, found there complete."""
    huggingface_hub, constants, errors = _hub()
    try:
        folder = Path(huggingface_hub.snapshot_download(
            listing.repo_id, repo_type="dataset", revision=listing.requested if listing.online else listing.revision,
            local_files_only=not listing.online, allow_patterns=[glob.escape(name) for name in files]))
    except (errors.LocalEntryNotFoundError, errors.IncompleteSnapshotError):
        missing = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
        raise FileNotFoundError(
            f"{listing.repo_id}@{listing.revision[:12]}: the Hugging Face cache ({constants.HF_HUB_CACHE}) lacks "
            f"{missing}, and the Hub is out of reach (offline); run once with a network") from None
    except errors.HfHubHTTPError as error:
        raise OSError(f"{listing.repo_id}: downloading {', '.join(files[:4])} failed "
                      f"({str(error).splitlines()[0][:200]}); run again") from None
    if folder.name != listing.revision:  # a commit pushed to the branch between listing and download
        raise OSError(f"{listing.repo_id}: the Hub dataset changed while it was read ({listing.revision[:12]}, then "
                      f"{folder.name[:12]}); run again, or pin a commit with {REVISION_FLAG}")
    return folder


def _local(listing: _Listing, files: list[str], stream: bool) -> list[Path | str]:
    """Where ``files`` are read: ``hf://`` URLs at the commit (``stream``, online), else the cached files."""
    if stream and listing.online:
        return [f"{HF_URL_PREFIX}datasets/{listing.repo_id}@{listing.revision}/{name}" for name in files]
    folder = _download(listing, files)
    return [folder / name for name in files]


def hub_dataset_files(repo_id: str, *, revision: str | None = None, parts: tuple[str, ...] = PARTS,
                      split: str | None = "test", stream: bool = False) -> DatasetFiles:
    """The :class:`DatasetFiles` of the Hub dataset ``repo_id`` (module doc: BEIR's or MTEB's layout), with the
    files of ``parts`` (``corpus``, ``queries``, ``qrels`` of ``split``) downloaded at ``revision`` into the
    Hugging Face cache, or found there offline. ``stream=True`` gives ``hf://`` URLs of the corpus and queries
    instead (read as streams through ``huggingface_hub.HfFileSystem``, nothing downloaded), where the Hub is
    reachable."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"parts {sorted(unknown)}: choose among {PARTS}")
    listing = _listing(repo_id, revision)
    found = {part: _part_files(listing.files, part) for part in parts if part != "qrels"}
    layout = "mteb" if any(name.startswith("qrels/") for name in listing.files) else "beir"
    missing = [part for part, names in found.items() if not names]
    if missing:
        more = f", ... ({len(listing.files)} files)" if len(listing.files) > 10 else ""
        held = ", ".join(listing.files[:10]) + more
        raise ValueError(f"{repo_id}@{listing.revision[:12]} is a Hub dataset in neither BEIR's nor MTEB's layout: "
                         f"no {' and no '.join(missing)} found. Looked for {LOOKED_FOR}; it holds: {held or 'nothing'}")
    hub: dict = {"repo_id": repo_id, "revision": listing.revision, "layout": layout}
    qrels_listing, qrels_names = listing, []
    if "qrels" in parts:  # before any download: a split without judgements fetches nothing
        folder = "qrels/"
        if layout == "beir":
            companion = repo_id + QRELS_COMPANION_SUFFIX
            try:
                qrels_listing = _listing(companion, None, argument=False)
            except NoSuchHubDataset:
                raise NoSuchHubDataset(
                    f"{repo_id}@{listing.revision[:12]} has no judgements: no qrels/ folder (MTEB's layout), and no "
                    f"companion dataset {companion} on the Hub (BEIR's layout); give a dataset with qrels") from None
            folder = "" if _qrels_files(qrels_listing.files, "", split)[1] else "qrels/"
            hub["qrels"] = {"repo_id": companion, "revision": qrels_listing.revision}
        qrels_names, splits = _qrels_files(qrels_listing.files, folder, split)
        if not qrels_names:
            where = f"{qrels_listing.repo_id}@{qrels_listing.revision[:12]}" + (f" {folder}" if folder else "")
            offline = "" if qrels_listing.online else " (offline: the files earlier downloads fetched)"
            raise ValueError(f"{repo_id} has no judgements of split {split!r} in {where}{offline}; its splits: "
                             f"{', '.join(splits) or 'none'}. Pass --split one of them")
    local = {part: _local(listing, names, stream) for part, names in found.items()}
    qrels = [Path(p) for p in _local(qrels_listing, qrels_names, stream=False)] if qrels_names else []
    return DatasetFiles(
        name=repo_id.rsplit("/", 1)[-1], source=f"{HF_URL_PREFIX}datasets/{repo_id}@{listing.revision}",
        corpus_files=tuple(local.get("corpus", ())), queries_files=tuple(local.get("queries", ())),
        qrels=tuple(qrels), split=split if "qrels" in parts else None, hub=hub,
    )


__all__ = ["PARTS", "DatasetFiles", "NoSuchHubDataset", "check_revision", "hub_dataset_files", "is_hub_dataset_id",
           "names_hub_dataset", "resolve_dataset", "revisions_for"]
