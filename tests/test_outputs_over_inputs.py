"""No command writes over what it reads: an output that is an input, lies inside an input model or dataset folder,
or holds an input, is refused in one line before anything is written (``data.files.refuse_outputs_over_inputs``,
called by every command through ``cli.checks.check_outputs``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dense_encoders.cli import main
from dense_encoders.data.embedding_shards import save_embedding_shards
from dense_encoders.data.files import OutputDirError, refuse_outputs_over_inputs

BUNDLED_BEIR = Path(__file__).resolve().parents[1] / "src" / "dense_encoders" / "resources" / "quickstart_beir"


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (itself included), with the bytes of each file."""
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted([folder, *folder.rglob("*")])}


@pytest.fixture
def workspace(tmp_path, condenser_folder):
    """A model folder, a BEIR folder, a run file, a corpus file and a folder of document embedding shards."""
    data = tmp_path / "beir"
    shutil.copytree(BUNDLED_BEIR, data)
    run = tmp_path / "first_stage.trec"
    run.write_text("q1 Q0 d1 1 1.0 bm25\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "dense passage retrieval " * 8}) + "\n")
    shards = tmp_path / "emb"
    save_embedding_shards(shards, np.eye(4, dtype=np.float32), ["a", "b", "c", "d"],
                          settings={"side": "document", "similarity": "dot"})
    return {"model": condenser_folder, "data": data, "run": run, "corpus": corpus, "shards": shards,
            "manifest": shards / "manifest.json", "encoding": shards / "encoding.json", "root": tmp_path}


# (argv, the flag the message names, the relation and the input it names): each a way a user can lose an input
CASES = {
    "evaluate --output is a file of the model folder (the reported case)": (
        lambda w: ["evaluate", w["model"], w["data"], "--output", w["model"] / "config.json"],
        "--output", "lies inside MODEL", "model"),
    "evaluate --run-output over the dataset's qrels": (
        lambda w: ["evaluate", w["model"], w["data"], "--run-output", w["data"] / "qrels" / "test.tsv"],
        "--run-output", "lies inside DATA", "data"),
    "evaluate --cache-dir inside the model folder": (
        lambda w: ["evaluate", w["model"], w["data"], "--cache-dir", w["model"] / "embeddings"],
        "--cache-dir", "lies inside MODEL", "model"),
    "encode --output holding the model": (
        lambda w: ["encode", w["model"], w["data"], "--output", w["root"]],
        "--output", "holds MODEL", "model"),
    "search --output over the corpus shards' manifest": (
        lambda w: ["search", w["shards"], w["data"], "--output", w["shards"] / "manifest.json"],
        "--output", "is CORPUS", "manifest"),
    "index --output whose record would replace the manifest": (
        lambda w: ["index", w["shards"], "--faiss", "Flat", "--output", w["shards"] / "manifest.faiss"],
        "--output's record", "is SHARDS", "manifest"),
    "index --output whose record would replace the shards folder's own record (issue 53)": (
        lambda w: ["index", w["shards"], "--faiss", "Flat", "--output", w["shards"] / "encoding.faiss"],
        "--output's record", "is SHARDS", "encoding"),
    "search --output over the shards folder's own record (issue 53)": (
        lambda w: ["search", w["shards"], w["data"], "--output", w["shards"] / "encoding.json"],
        "--output", "is CORPUS", "encoding"),
    "score-teacher --output over its --run": (
        lambda w: ["score-teacher", w["model"], "--run", w["run"], "--data", w["data"], "--output", w["run"]],
        "--output", "is --run", "run"),
    "distill into the student's folder": (
        lambda w: ["distill", "--student", w["model"], "--train-file", w["run"], "--corpus", w["data"],
                   "--output-dir", w["model"]],
        "--output-dir", "is --student", "model"),
    "pretrain into a folder holding its corpus": (
        lambda w: ["pretrain", "condenser", "--corpus", w["corpus"], "--output-dir", w["root"], "--use-cpu"],
        "--output-dir", "holds --corpus", "corpus"),
    "layerwise into the dataset folder": (
        lambda w: ["layerwise", "--cross-encoder", w["model"], "--dual-encoder", w["model"], "--data", w["data"],
                   "--output-dir", w["data"] / "layerwise"],
        "--output-dir", "lies inside --data", "data"),
    "infuse into the cross-encoder's folder": (
        lambda w: ["infuse", "--cross-encoder", w["model"], "--train-data", w["data"], "--output-dir",
                   w["model"] / "de-2-ce"],
        "--output-dir", "lies inside --cross-encoder", "model"),
    "convert into the source folder": (
        lambda w: ["convert", w["model"], w["model"] / "converted"],
        "OUT", "lies inside SOURCE", "model"),
    "quickstart into a folder holding --data": (
        lambda w: ["quickstart", "--data", w["data"], "--output-dir", w["root"]],
        "--output-dir", "holds --data", "data"),
    "bench --json over --lengths-from": (
        lambda w: ["bench", "--quick", "--lengths-from", w["run"], "--json", w["run"], "--no-plot"],
        "--json", "is --lengths-from", "run"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_command_refuses_an_output_over_its_inputs(case, workspace, capsys):
    argv, flag, relation, source = CASES[case]
    argv = [str(a) for a in argv(workspace)]
    before = tree(workspace["root"])
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{relation} {workspace[source]}, which this command reads: nothing was written; choose another " \
           f"{flag}." in err, err
    assert err.split(": error: ", 1)[1].startswith(f"{flag} "), err  # the message starts with the output's flag
    assert tree(workspace["root"]) == before  # nothing written, nothing made, nothing beside the folders either


def test_outputs_beside_the_inputs_are_written(workspace, capsys):
    """What the check must let through: a file next to an input file, a new index inside the shards folder (its
    documented place), and a Hub id that is no local path."""
    w = workspace
    refuse_outputs_over_inputs([("--output", w["root"] / "teacher.jsonl")], [("--run", w["run"]),
                                                                             ("--data", w["data"])])
    refuse_outputs_over_inputs([("--output", w["shards"] / "index-Flat.faiss")],
                               [("SHARDS", p) for p in sorted(w["shards"].iterdir())])
    refuse_outputs_over_inputs([("--output-dir", w["root"] / "out")], [("MODEL", "org/name"), ("DATA", None)])
    assert main(["index", str(w["shards"]), "--faiss", "Flat"]) == 0
    assert (w["shards"] / "index-Flat.faiss").is_file() and (w["shards"] / "index-Flat.json").is_file()


def test_links_are_followed_to_what_they_reach(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "alias").symlink_to(model)  # the output spelled through a link into the model
    with pytest.raises(OutputDirError, match="lies inside MODEL"):
        refuse_outputs_over_inputs([("--output", tmp_path / "alias" / "results.json")], [("MODEL", model)])
    (tmp_path / "hard.json").hardlink_to(model / "config.json")  # the same file under another name
    with pytest.raises(OutputDirError, match=r"--output \S+hard.json is MODEL-CONFIG"):
        refuse_outputs_over_inputs([("--output", tmp_path / "hard.json")], [("MODEL-CONFIG", model / "config.json")])
