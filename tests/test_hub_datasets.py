"""Datasets named by Hub id (issue 31 §1), against the loopback Hub of tests/hub_server.py: BEIR's layout
(``corpus.jsonl.gz``, ``queries.jsonl.gz``, qrels in the companion ``<id>-qrels``) and MTEB's (Parquet shards,
``qrels/``), ``--dataset-revision``, the commit recorded, offline runs from the cache, a local path winning, and the
one-line errors. The reference everywhere is the same data written as a plain local BEIR folder, read by the
readers the package had before Hub ids (or hand-written values)."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO_ROOT
from hub_server import LoopbackHub
from huggingface_hub import CommitOperationAdd, HfApi, constants

from dense_encoders import cli
from dense_encoders.data.retrieval import load_beir, load_dataset_for_evaluation

# huggingface_hub's own LFS upload passes a file object as `data=`, which httpx2 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

TOKEN = "hf_loopback_datasets_0123456789"
CORPUS = [
    {"_id": "d1", "title": "The Sun", "text": "the sun is a main sequence star of hydrogen and helium"},
    {"_id": "d2", "title": "", "text": "the moon orbits the earth once a month"},
    {"_id": "d3", "title": "Volcanoes", "text": "io is the most volcanic moon of jupiter"},
    {"_id": "d4", "title": "", "text": "a piano has eighty eight keys"},
    {"_id": "d5", "title": "Rivers", "text": "the nile is a long river in africa"},
    {"_id": "d6", "title": "", "text": "bananas are yellow and sweet fruit"},
]
QUERIES = [
    {"_id": "q1", "text": "what is the sun made of"},
    {"_id": "q2", "text": "which moon has volcanoes"},
    {"_id": "q3", "text": "how many keys on a piano"},
    {"_id": "q4", "text": "longest river in africa"},
]
QRELS = {"test": [("q1", "d1", 1), ("q2", "d3", 2)], "train": [("q3", "d4", 1), ("q4", "d5", 1)]}
ADDED = [{"_id": "d7", "title": "", "text": "the earth has one moon"}, {"_id": "d8", "title": "", "text": "mars"}]


def jsonl(rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def tsv(rows) -> bytes:
    return ("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows)).encode()


def parquet(rows) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def beir_folder(folder, corpus=CORPUS, queries=QUERIES, qrels=QRELS):
    """The plain local BEIR folder of the same data: the reference."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_bytes(jsonl(corpus))
    (folder / "queries.jsonl").write_bytes(jsonl(queries))
    for split, rows in qrels.items():
        (folder / "qrels" / f"{split}.tsv").write_bytes(tsv(rows))
    return folder


def push(hub, repo_id: str, files: dict[str, bytes], message: str = "add files") -> str:
    """Commit ``files`` to the dataset repository ``repo_id`` (created if new); the commit's id."""
    api = HfApi(endpoint=hub.endpoint, token=hub.token)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
    operations = [CommitOperationAdd(path, data) for path, data in files.items()]
    return api.create_commit(repo_id, repo_type="dataset", operations=operations, commit_message=message).oid


def beir_hub_files(corpus=CORPUS) -> dict[str, bytes]:
    return {"corpus.jsonl.gz": gzip.compress(jsonl(corpus)), "queries.jsonl.gz": gzip.compress(jsonl(QUERIES))}


def mteb_hub_files() -> dict[str, bytes]:
    """MTEB's layout: the corpus as two Parquet shards (``id`` column, as MTEB's Parquet datasets name it), gzip
    queries, qrels of test as JSON lines with float scores (mteb/scifact's) and of train as a Parquet shard."""
    corpus = [{"id": row["_id"], "title": row["title"], "text": row["text"]} for row in CORPUS]
    return {
        "corpus/corpus-00000-of-00002.parquet": parquet(corpus[:4]),
        "corpus/corpus-00001-of-00002.parquet": parquet(corpus[4:]),
        "queries.jsonl.gz": gzip.compress(jsonl(QUERIES)),
        "qrels/test.jsonl": jsonl([{"query-id": q, "corpus-id": d, "score": float(s)} for q, d, s in QRELS["test"]]),
        "qrels/train-00000-of-00001.parquet": parquet([{"query-id": q, "corpus-id": d, "score": s}
                                                       for q, d, s in QRELS["train"]]),
        "README.md": b"---\nlicense: cc-by-4.0\n---\n",
    }


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The loopback Hub, this process pointed at it, and a Hugging Face cache of the test's own (HF_HOME
    ``tmp_path/hf``), so that nothing downloaded leaks into other tests."""
    with LoopbackHub(token=TOKEN) as server, server.in_process():
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
        yield server
    assert not server.errors, "\n".join(server.errors)


@pytest.fixture
def beir_on_hub(hub):
    """BeIR/tiny (BEIR's layout) and its companion BeIR/tiny-qrels: their commits."""
    dataset = push(hub, "BeIR/tiny", beir_hub_files())
    qrels = push(hub, "BeIR/tiny-qrels", {f"{split}.tsv": tsv(rows) for split, rows in QRELS.items()})
    return {"dataset": dataset, "qrels": qrels}


def same_data(dataset, reference):
    assert dataset.corpus == reference.corpus
    assert dataset.queries == reference.queries
    assert dataset.qrels == reference.qrels
    assert (dataset.name, dataset.split) == (reference.name, reference.split)


def run_main(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


def one_line_error(capsys, argv) -> str:
    """The error of ``dense-encoders ARGV``: exit code 2, one line, no traceback."""
    capsys.readouterr()  # what came before (upload progress bars)
    code = run_main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


# ---------------------------------------------------------------------------------------------- the two layouts


def test_beir_layout_reads_as_the_local_folder_and_records_both_commits(hub, beir_on_hub, tmp_path):
    reference_folder = beir_folder(tmp_path / "tiny")
    for split in ("test", "train"):
        dataset = load_dataset_for_evaluation("BeIR/tiny", split=split)
        same_data(dataset, load_beir(reference_folder, split))
        assert dataset.source == f"hf://datasets/BeIR/tiny@{beir_on_hub['dataset']}"
        assert dataset.extra["hub"] == {"repo_id": "BeIR/tiny", "revision": beir_on_hub["dataset"], "layout": "beir",
                                        "qrels": {"repo_id": "BeIR/tiny-qrels", "revision": beir_on_hub["qrels"]}}
    assert dataset.qrels == {"q3": {"d4": 1}, "q4": {"d5": 1}}  # by hand: QRELS["train"]


def test_mteb_layout_parquet_shards_gzip_and_jsonl_qrels(hub, tmp_path):
    commit = push(hub, "mteb/tiny", mteb_hub_files())
    reference_folder = beir_folder(tmp_path / "tiny")
    for split in ("test", "train"):
        dataset = load_dataset_for_evaluation("mteb/tiny", split=split)
        same_data(dataset, load_beir(reference_folder, split))
        assert dataset.extra["hub"] == {"repo_id": "mteb/tiny", "revision": commit, "layout": "mteb"}
    # only what a command reads is downloaded: no README
    snapshot = tmp_path / "hf" / "hub" / "datasets--mteb--tiny" / "snapshots" / commit
    assert sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()) == sorted(
        name for name in mteb_hub_files() if name != "README.md")


def test_a_local_gzip_beir_folder_reads_as_the_plain_one(tmp_path):
    plain = beir_folder(tmp_path / "plain" / "tiny")
    packed = tmp_path / "packed" / "tiny"
    (packed / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (packed / f"{name}.gz").write_bytes(gzip.compress((plain / name).read_bytes()))
    same_data(load_dataset_for_evaluation(packed), load_beir(plain))


# ---------------------------------------------------------------------------------------------- revisions


def test_dataset_revision_reads_the_old_commit_and_the_results_json_records_it(hub, beir_on_hub, tmp_path, capsys):
    old = beir_on_hub["dataset"]
    HfApi(endpoint=hub.endpoint, token=hub.token).create_tag("BeIR/tiny", tag="v1", revision=old, repo_type="dataset")
    new = push(hub, "BeIR/tiny", beir_hub_files(CORPUS + ADDED), message="two more documents")
    assert new != old
    recorded = {}
    for name, revision in (("main", None), ("commit", old), ("tag", "v1")):
        output = tmp_path / f"{name}.json"
        argv = ["evaluate", "bm25", "BeIR/tiny", "--output", str(output), "--no-progress"]
        assert run_main(argv + (["--dataset-revision", revision] if revision else [])) == 0, capsys.readouterr().err
        recorded[name] = json.loads(output.read_text())["dataset"]
    assert recorded["main"]["hub"]["revision"] == new and recorded["main"]["num_documents"] == 8
    for name in ("commit", "tag"):
        assert recorded[name]["hub"]["revision"] == old and recorded[name]["num_documents"] == 6
        assert recorded[name]["source"] == f"hf://datasets/BeIR/tiny@{old}"
        assert recorded[name]["hub"]["qrels"] == {"repo_id": "BeIR/tiny-qrels", "revision": beir_on_hub["qrels"]}


# ---------------------------------------------------------------------------------------------- offline, local paths


def test_offline_reads_the_cache_and_asks_the_hub_nothing(hub, beir_on_hub, tmp_path, monkeypatch):
    HfApi(endpoint=hub.endpoint, token=hub.token).create_tag("BeIR/tiny", tag="v1", repo_type="dataset")
    online = {revision: load_dataset_for_evaluation("BeIR/tiny", revision=revision) for revision in (None, "v1")}
    asked = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for revision, reference in online.items():
        offline = load_dataset_for_evaluation("BeIR/tiny", revision=revision)
        same_data(offline, reference)
        assert offline.extra["hub"] == reference.extra["hub"]
    assert len(hub.requests) == asked


def test_hf_hub_offline_in_a_fresh_process_gives_the_online_results(hub, beir_on_hub, tmp_path, capsys):
    online = tmp_path / "online.json"
    assert run_main(["evaluate", "bm25", "BeIR/tiny", "--output", str(online), "--no-progress"]) == 0
    offline = tmp_path / "offline.json"
    env = hub.env(hf_home=tmp_path / "hf", offline=True)  # the cache the in-process run filled
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))
    hub.stop()  # nothing to ask: HF_HUB_OFFLINE=1 reads the cache
    result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", "evaluate", "bm25", "BeIR/tiny", "--output",
                             str(offline), "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    online, offline = json.loads(online.read_text()), json.loads(offline.read_text())
    assert offline["dataset"] == online["dataset"]
    assert offline["metrics"] == online["metrics"] and offline["per_query"] == online["per_query"]


def test_a_local_path_of_the_same_spelling_wins(hub, beir_on_hub, tmp_path, monkeypatch):
    local = beir_folder(tmp_path / "BeIR" / "tiny", corpus=CORPUS + ADDED)
    monkeypatch.chdir(tmp_path)
    asked = len(hub.requests)
    dataset = load_dataset_for_evaluation("BeIR/tiny")
    same_data(dataset, load_beir(local))
    assert len(dataset.corpus) == 8 and "hub" not in dataset.extra and dataset.source == str(local.resolve())
    assert len(hub.requests) == asked


def test_a_revision_is_a_ref_name_offline_as_online(hub, beir_on_hub, tmp_path, capsys, monkeypatch):
    """Issue 41 §4: ``../refs/main`` is no branch, tag or commit (git allows no ref name with ``..``): refused in one
    line before the Hub or the cache is asked, offline as online, where offline it was read as a path inside the
    cache (``refs/../refs/main``: main, exit 0). A branch whose name holds ``/`` is one the Hub knows, and offline
    one the cache's refs know."""
    api = HfApi(endpoint=hub.endpoint, token=hub.token)
    old = beir_on_hub["dataset"]
    push(hub, "BeIR/tiny", beir_hub_files(CORPUS + ADDED), message="add two documents")
    api.create_branch("BeIR/tiny", branch="release/v1", revision=old, repo_type="dataset")
    evaluate = ["evaluate", "bm25", "BeIR/tiny", "--no-progress", "--output"]
    online = tmp_path / "online.json"
    assert run_main(evaluate + [str(online), "--dataset-revision", "release/v1"]) == 0, capsys.readouterr().err
    assert run_main(evaluate + [str(tmp_path / "main.json")]) == 0, capsys.readouterr().err  # main in the cache too
    for offline in (False, True):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        asked = len(hub.requests)
        for revision, what in (("../refs/main", "holds '..'"), ("refs/../main", "holds '..'"),
                               ("/main", "starts with '/'"), ("..\\refs\\main", "holds '..'"),
                               (".", "has a part starting with '.'")):
            output = tmp_path / "refused.json"
            err = one_line_error(capsys, evaluate + [str(output), "--dataset-revision", revision])
            assert err == (f"dense-encoders evaluate: error: --dataset-revision {revision!r}: not a branch, tag or "
                           f"commit (no name of one {what}); give one of BeIR/tiny's branches, tags or 40-hex "
                           "commits, or leave --dataset-revision out for main")
            assert not output.exists() and len(hub.requests) == asked
    # offline, the branch with a / is the cache's refs/release/v1: the old commit, read as online
    assert (tmp_path / "hf" / "hub" / "datasets--BeIR--tiny" / "refs" / "release" / "v1").read_text() == old
    offline = tmp_path / "offline.json"
    assert run_main(evaluate + [str(offline), "--dataset-revision", "release/v1"]) == 0, capsys.readouterr().err
    online, offline = json.loads(online.read_text()), json.loads(offline.read_text())
    assert offline["dataset"] == online["dataset"] and online["dataset"]["hub"]["revision"] == old
    assert offline["metrics"] == online["metrics"] and online["dataset"]["num_documents"] == len(CORPUS)
    # one the cache's refs do not know is not guessed at
    err = one_line_error(capsys, evaluate + [str(tmp_path / "x.json"), "--dataset-revision", "release/v2"])
    assert "holds no copy of the Hub dataset BeIR/tiny@release/v2; run once with a network" in err


# ---------------------------------------------------------------------------------------------- one-line errors


def test_errors_are_one_line_each(hub, beir_on_hub, tmp_path, capsys, monkeypatch):
    evaluate = ["evaluate", "bm25"]
    err = one_line_error(capsys, evaluate + ["nobody/nothing"])
    assert "nobody/nothing: not a local path, and no dataset nobody/nothing on the Hub" in err
    assert "give a BEIR folder or the id of a Hub dataset" in err

    push(hub, "someone/notes", {"README.md": b"notes\n", "data/train.csv": b"a,b\n1,2\n"})
    err = one_line_error(capsys, evaluate + ["someone/notes"])
    assert "is a Hub dataset in neither BEIR's nor MTEB's layout: no corpus and no queries found" in err
    assert "Looked for corpus.jsonl[.gz] or corpus/*.parquet" in err and "<id>-qrels" in err
    assert "it holds: .gitattributes, README.md, data/train.csv" in err

    push(hub, "someone/no-qrels", beir_hub_files())
    err = one_line_error(capsys, evaluate + ["someone/no-qrels"])
    assert "has no judgements: no qrels/ folder (MTEB's layout), and no companion dataset someone/no-qrels-qrels" in err

    err = one_line_error(capsys, evaluate + ["BeIR/tiny", "--split", "dev"])
    assert f"BeIR/tiny has no judgements of split 'dev' in BeIR/tiny-qrels@{beir_on_hub['qrels'][:12]}" in err
    assert "its splits: test, train. Pass --split one of them" in err

    err = one_line_error(capsys, evaluate + ["BeIR/tiny", "--dataset-revision", "nope"])
    assert "BeIR/tiny: the Hub dataset has no revision 'nope'" in err

    folder = beir_folder(tmp_path / "local")
    err = one_line_error(capsys, evaluate + [str(folder), "--dataset-revision", "v1"])
    assert f"--dataset-revision v1: {folder} is a local path" in err

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    err = one_line_error(capsys, evaluate + ["BeIR/other"])
    assert "BeIR/other: not a local path, and offline (HF_HUB_OFFLINE=1), and the Hugging Face cache" in err
    assert "holds no copy of the Hub dataset BeIR/other@main; run once with a network" in err

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no network
    err = one_line_error(capsys, evaluate + ["BeIR/other"])
    assert "BeIR/other: not a local path, and the Hub is out of reach (ConnectError" in err
    assert "holds no copy of the Hub dataset BeIR/other@main" in err


# ---------------------------------------------------------------------------------------------- every command


def shard_contents(folder):
    from dense_encoders.data.embedding_shards import EmbeddingShards

    shards = EmbeddingShards.open(folder)
    ids, rows = [], []
    for _, embeddings, shard_ids in shards.shards():
        ids += shard_ids
        rows += embeddings.tolist()
    return shards, ids, rows


def test_encode_a_hub_corpus_and_queries_as_the_local_files_and_the_manifest_records_the_commit(
        hub, beir_on_hub, condenser_folder, tmp_path, capsys):
    from dense_encoders.data.embedding_shards import encode_command

    mteb = push(hub, "mteb/tiny", mteb_hub_files())
    local = beir_folder(tmp_path / "tiny")
    for side, dataset, commit in (("document", "BeIR/tiny", beir_on_hub["dataset"]), ("query", "mteb/tiny", mteb)):
        flags = ["--queries"] if side == "query" else []
        outputs = {}
        for name, source in (("hub", dataset), ("local", str(local))):
            outputs[name] = tmp_path / f"{side}-{name}"
            argv = ["encode", str(condenser_folder), source, "--output", str(outputs[name]), "--no-progress", *flags]
            assert run_main(argv) == 0, capsys.readouterr().err
        shards, ids, rows = shard_contents(outputs["hub"])
        _, local_ids, local_rows = shard_contents(outputs["local"])
        assert ids == local_ids == [row["_id"] for row in (CORPUS if side == "document" else QUERIES)]
        assert rows == local_rows
        source = shards.settings["source"]
        assert source["hub"]["repo_id"] == dataset and source["hub"]["revision"] == commit
        part = "corpus" if side == "document" else "queries"
        assert source["path"].endswith(f"/snapshots/{commit}/{part}.jsonl.gz")  # not the cache's nameless blob
        manifest = json.loads((outputs["hub"] / "manifest.json").read_text())
        assert manifest["settings"]["source"]["hub"]["revision"] == commit
        # the command that continues the run names the dataset by id at the commit read, not by a cache path
        command = encode_command(outputs["hub"], shards.settings)
        assert f" {dataset} --output {outputs['hub']} --dataset-revision {commit}" in command


def test_score_teacher_data_by_hub_id_writes_what_the_local_folder_gives(hub, beir_on_hub, tok, tmp_path, capsys):
    from test_score_teacher import _build

    teacher = tmp_path / "teacher"
    _build(tok, teacher, num_labels=1, seed=0)
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{query} Q0 {doc} {rank} {10 - rank} bm25\n" for query in ("q3", "q4")
                           for rank, doc in enumerate(("d4", "d5", "d6"), start=1)))
    local = beir_folder(tmp_path / "tiny")
    written = {}
    for name, data in (("hub", "BeIR/tiny"), ("local", str(local))):
        written[name] = tmp_path / f"{name}.jsonl"
        argv = ["score-teacher", str(teacher), "--run", str(run), "--data", data, "--split", "train", "--output",
                str(written[name]), "--no-progress", "--include-texts"]
        assert run_main(argv) == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in written["hub"].read_text().splitlines()]
    assert [line["query_id"] for line in lines] == ["q3", "q4"]
    assert written["hub"].read_text() == written["local"].read_text()


def test_distill_corpus_and_queries_by_hub_id_resolve_the_training_file(hub, beir_on_hub, tmp_path):
    from dense_encoders.settings.distillation import DistillationSetup
    from dense_encoders.trainer.distillation import load_training_records

    push(hub, "mteb/tiny", mteb_hub_files())
    local = beir_folder(tmp_path / "tiny")
    train = tmp_path / "train.jsonl"
    train.write_bytes(jsonl([{"query_id": "q3", "document_ids": ["d4", "d6"], "scores": [3.0, 1.0]},
                             {"query_id": "q4", "document_ids": ["d5", "d1"], "scores": [2.0, 0.5]}]))
    by_id = load_training_records(DistillationSetup(student="s", train_file=str(train), corpus="BeIR/tiny",
                                                    queries="mteb/tiny"))
    by_folder = load_training_records(DistillationSetup(student="s", train_file=str(train), corpus=str(local),
                                                        queries=str(local / "queries.jsonl")))
    assert by_id == by_folder
    assert by_id[0]["query"] == "how many keys on a piano"  # by hand: q3 of QUERIES
    assert by_id[0]["documents"] == ["a piano has eighty eight keys", "bananas are yellow and sweet fruit"]
    with pytest.raises(ValueError, match="--dataset-revision v1: no dataset here is given by Hub id"):
        load_training_records(DistillationSetup(student="s", train_file=str(train), corpus=str(local),
                                                dataset_revision="v1"))


def test_pretrain_corpus_by_hub_id_read_and_streamed_as_the_local_file(hub, beir_on_hub, tmp_path):
    from dense_encoders.data.corpus import corpus_files, load_corpus
    from dense_encoders.trainer.pretraining import check_corpus

    push(hub, "mteb/tiny", mteb_hub_files())
    local = beir_folder(tmp_path / "tiny") / "corpus.jsonl"
    expected = [row["text"] for row in load_corpus(local)]
    assert expected[0] == "The Sun the sun is a main sequence star of hydrogen and helium"  # title + text
    for dataset in ("BeIR/tiny", "mteb/tiny"):
        streamed = corpus_files(dataset, streaming=True)
        assert streamed and all(str(name).startswith(f"hf://datasets/{dataset}@") for name in streamed)
        check_corpus(dataset, streaming=True)
        assert [row["text"] for row in load_corpus(dataset, streaming=True)] == expected
        snapshots = tmp_path / "hf" / "hub" / f"datasets--{dataset.replace('/', '--')}" / "snapshots"
        assert not snapshots.exists()  # streamed from the Hub, nothing downloaded
        assert [row["text"] for row in load_corpus(dataset)] == expected
        assert snapshots.is_dir()


def test_pretrain_cli_streams_a_hub_corpus_at_a_revision(hub, beir_on_hub, tmp_path, capsys):
    old = beir_on_hub["dataset"]
    push(hub, "BeIR/tiny", {"corpus.jsonl.gz": gzip.compress(b"")}, message="empty the corpus")  # main: no text
    output = tmp_path / "run"
    argv = ["pretrain", "condenser", "--preset", "tiny", "--corpus", "BeIR/tiny", "--streaming", "--output_dir",
            str(output), "--max_steps", "1", "--per_device_train_batch_size", "2", "--max_seq_length", "32",
            "--save_strategy", "no", "--use_cpu", "--report_to", "none"]
    err = one_line_error(capsys, argv)
    assert "BeIR/tiny has no text: it is empty or every document is blank" in err  # main's corpus
    assert run_main(argv + ["--dataset-revision", old]) == 0, capsys.readouterr().err
    record = json.loads((output / "pretraining_setup.json").read_text())
    assert record["corpus"] == "BeIR/tiny" and record["dataset_revision"] == old


def test_layerwise_and_infuse_give_the_revision_to_hub_datasets_only(hub, beir_on_hub, tmp_path, monkeypatch,
                                                                     capsys):
    import dense_encoders.evaluation.layerwise as layerwise
    import dense_encoders.trainer.infusion as infusion

    local = beir_folder(tmp_path / "local")
    seen = []

    def loaded(source, split="test", *, revision=None, **options):
        seen.append((str(source), revision))
        raise ValueError("stop here: the datasets were named")

    monkeypatch.setattr(layerwise, "load_dataset_for_evaluation", loaded)
    monkeypatch.setattr(infusion, "load_dataset_for_evaluation", loaded)
    argv = ["layerwise", "--cross-encoder", "ce", "--dual-encoder", "de", "--data", str(local), "BeIR/tiny",
            "--dataset-revision", "v1", "--output-dir", str(tmp_path / "lw")]
    assert run_main(argv) == 2 and "stop here" in capsys.readouterr().err
    assert seen == [(str(local), None)]
    seen.clear()
    argv = ["layerwise", "--cross-encoder", "ce", "--dual-encoder", "de", "--data", "BeIR/tiny", str(local),
            "--dataset-revision", "v1", "--output-dir", str(tmp_path / "lw2")]
    assert run_main(argv) == 2
    assert seen == [("BeIR/tiny", "v1")]
    seen.clear()
    argv = ["infuse", "--cross-encoder", "ce", "--train-data", "BeIR/tiny", "--eval-data", str(local),
            "--dataset-revision", "v1", "--output-dir", str(tmp_path / "inf")]
    assert run_main(argv) == 2 and "stop here" in capsys.readouterr().err
    assert seen == [("BeIR/tiny", "v1")]
    err = one_line_error(capsys, ["layerwise", "--cross-encoder", "ce", "--dual-encoder", "de", "--data", str(local),
                                  "--dataset-revision", "v1", "--output-dir", str(tmp_path / "lw3")])
    assert "--dataset-revision v1: no dataset here is given by Hub id" in err


def test_the_model_card_names_the_hub_dataset_at_its_commit(hub, beir_on_hub, condenser_folder, tmp_path, capsys):
    from huggingface_hub import ModelCard

    from dense_encoders.hub import model_card

    output = tmp_path / "results.json"
    assert run_main(["evaluate", str(condenser_folder), "BeIR/tiny", "--output", str(output), "--no-progress"]) == 0
    card = model_card(condenser_folder, results=[output])
    commit, qrels = beir_on_hub["dataset"], beir_on_hub["qrels"]
    assert (f"| `BeIR/tiny` at revision `{commit[:12]}`, qrels `BeIR/tiny-qrels` at `{qrels[:12]}` | test |"
            in card.content)
    results = ModelCard(card.content).data.eval_results
    assert {(r.dataset_name, r.dataset_revision, r.dataset_split) for r in results} == {("BeIR/tiny", commit, "test")}


# ---------------------------------------------------------------------------------------------- done when


BUNDLED_BEIR = REPO_ROOT / "src" / "dense_encoders" / "resources" / "quickstart_beir"
VOLATILE = ("timings", "throughput", "environment", "created")  # seconds, speeds, versions, the time: per run


def scifact_cut(size: int = 40):
    """A small cut of the bundled BEIR data: the first ``size`` test judgements, their queries, and their documents
    plus as many others (distractors), in file order."""
    lines = (BUNDLED_BEIR / "qrels" / "test.tsv").read_text().splitlines()[1:size + 1]
    qrels = [tuple(line.split("\t")) for line in lines]
    judged_queries, judged_documents = {q for q, _, _ in qrels}, {d for _, d, _ in qrels}
    corpus = [json.loads(line) for line in (BUNDLED_BEIR / "corpus.jsonl").read_text().splitlines()]
    distractors = [row["_id"] for row in corpus if row["_id"] not in judged_documents][:size]
    corpus = [row for row in corpus if row["_id"] in judged_documents or row["_id"] in distractors]
    queries = [json.loads(line) for line in (BUNDLED_BEIR / "queries.jsonl").read_text().splitlines()]
    return corpus, [row for row in queries if row["_id"] in judged_queries], qrels


@pytest.mark.slow
def test_evaluate_minilm_on_beir_scifact_from_the_hub_gives_the_local_folder_results(hub, minilm_path, tmp_path):
    """Issue 31's done-when: `dense-encoders evaluate MINILM BeIR/scifact`, the dataset served by the loopback Hub in
    BEIR's layout, writes the results JSON the same data as a local BEIR folder gives; only where the data came from
    (``dataset.source``, ``dataset.hub``) differs, besides the per-run timings."""
    corpus, queries, qrels = scifact_cut()
    dataset = push(hub, "BeIR/scifact", {"corpus.jsonl.gz": gzip.compress(jsonl(corpus)),
                                         "queries.jsonl.gz": gzip.compress(jsonl(queries))})
    companion = push(hub, "BeIR/scifact-qrels", {"test.tsv": tsv(qrels)})
    local = beir_folder(tmp_path / "scifact", corpus=corpus, queries=queries, qrels={"test": qrels})
    results = {}
    for name, data in (("hub", "BeIR/scifact"), ("local", str(local))):
        output = tmp_path / f"{name}.json"
        assert run_main(["evaluate", str(minilm_path), data, "--output", str(output), "--no-progress"]) == 0
        results[name] = {key: value for key, value in json.loads(output.read_text()).items() if key not in VOLATILE}
        metrics = results[name]["metrics"]  # printed for the closing note (pytest -s)
        print(f"\n{name}: {data}: " + ", ".join(f"{key} {value:.4f}" for key, value in metrics.items()))
    hub_dataset, local_dataset = results["hub"].pop("dataset"), results["local"].pop("dataset")
    assert hub_dataset.pop("source") == f"hf://datasets/BeIR/scifact@{dataset}"
    assert local_dataset.pop("source") == str(local.resolve())
    assert hub_dataset.pop("hub") == {"repo_id": "BeIR/scifact", "revision": dataset, "layout": "beir",
                                      "qrels": {"repo_id": "BeIR/scifact-qrels", "revision": companion}}
    assert hub_dataset == local_dataset
    assert local_dataset["num_documents"] == len(corpus) and local_dataset["num_queries"] == len(queries)
    assert results["hub"] == results["local"]  # model, settings, metrics and per-query values, exactly
    assert results["local"]["metrics"]["ndcg@10"] > 0.5  # MiniLM finds these documents: not a degenerate run


@pytest.mark.parametrize("command", ["evaluate", "encode", "score-teacher", "distill", "layerwise", "infuse",
                                     "pretrain condenser"])
def test_every_command_that_takes_a_dataset_says_it_takes_a_hub_id(command, capsys):
    assert run_main([*command.split(), "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Hub dataset id" in text, text
    assert "--dataset-revision REV Revision of a dataset given by Hub id" in text
    assert "The commit read is recorded" in text


def test_tab_separated_qrels_of_any_name_stay_text(tmp_path):
    """MTEB's qrels come as JSON lines or Parquet records; every other qrels file is still read as text (BEIR's
    tab-separated, whatever its name), as before Hub datasets."""
    from dense_encoders.data.retrieval import read_qrels

    path = tmp_path / "qrels.txt"
    path.write_bytes(tsv(QRELS["test"]))
    assert read_qrels(path) == {"q1": {"d1": 1}, "q2": {"d3": 2}}
