"""Model cards state only what is true (issue 36, section 1), checked on REAL short runs of every family.

One journey, through the command line as the README runs it: a Condenser pre-training, a coCondenser continued
from it, teacher scores of a tiny cross-encoder, a student distilled from the coCondenser (asking for more
documents per query than the file holds, and a document length past its positions), its evaluations (exact,
FAISS, float16 embedding shards), a TITE pre-training, an infused DE-2-CE with its retrieve + rerank report and
a converted reference Condenser checkpoint. Each card is parsed and every number it states is compared with the
run's own records (the number extracted from the record's value, not the card's formatting of it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_bert_config
from transformers import BertForSequenceClassification

from dense_encoders.cli import main
from dense_encoders.hub import model_card

pytestmark = pytest.mark.slow

CPU = ["--use-cpu", "--report-to", "none", "--disable-tqdm", "true"]
ASKED_DOCUMENTS = 20  # more than the teacher file holds per query
TOP_K = 5  # documents the teacher scores per query
WORDS = ("protein cell gene virus drug trial cancer heart brain immune bacteria vaccine dose risk patient blood sugar "
         "insulin liver kidney").split()
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])")


def numbers(text) -> list[float]:
    """The numbers stated in ``text`` (code spans, which name things, left out), sorted."""
    return sorted(float(n) for n in NUMBER.findall(re.sub(r"`[^`]*`", "", str(text))))


def assert_numbers(line: str, expected: list, rel: float = 1e-3) -> None:
    stated = numbers(line)
    assert stated == pytest.approx(sorted(float(x) for x in expected), rel=rel), line


def section(card: str, title: str) -> list[str]:
    """The lines of the card's section ``## title``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", card, flags=re.M | re.S)
    return [line for line in match.group(1).splitlines() if line.strip()] if match else []


def facts(card: str, title: str = "Training") -> dict[str, str]:
    """``label -> line`` of the ``- label: value`` lines of a section (sub-bullets under ``label/``)."""
    found, parent = {}, None
    for line in section(card, title):
        if line.startswith("- "):
            parent = re.sub(r"`[^`]*`", "", line[2:]).split(":")[0]
            found[parent] = line
        elif line.startswith("  - "):
            found[f"{parent}/{len([k for k in found if k.startswith(parent + '/')])}"] = line
    return found


def description(card: str) -> str:
    """The architecture paragraph(s): between the title and the first section."""
    body = card.split("\n---\n", 1)[-1]
    return body.split("\n# ", 1)[-1].split("\n## ", 1)[0].split("Sentence-transformers configuration")[0]


def config_numbers(folder: Path) -> set[float]:
    values = set()

    def walk(value):
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            values.add(float(value))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(json.loads((folder / "config.json").read_text()))
    return values


def read(folder: Path, name: str):
    return json.loads((folder / name).read_text())


def common_training_numbers(folder: Path, card: str) -> dict[str, list]:
    """Expected numbers of the lines every Trainer run has: steps, batch size, last losses, hardware."""
    state, environment = read(folder, "trainer_state.json"), read(folder, "training_environment.json")
    expected = {"recipe": [], "optimizer steps": [state["global_step"], round(float(state["epoch"]), 2)],
                "batch size per device": [state["train_batch_size"]],
                "hardware": numbers(", ".join(str(v) for v in environment.values()))}
    logged = [entry for entry in state["log_history"] if "loss" in entry]
    if logged:
        last = logged[-1]
        expected[f"last logged losses (step {last['step']})"] = [last["step"], *[
            value for key, value in last.items() if key.endswith("loss")]]
        expected["learning rate at that step"] = [last["learning_rate"]]
    return expected


def check_facts(card: str, expected: dict[str, list], title: str = "Training") -> None:
    """Every fact line of the section is expected (no unverified statement), and states exactly its numbers."""
    stated = facts(card, title)
    assert set(stated) == set(expected), (sorted(stated), sorted(expected))
    for label, line in stated.items():
        assert_numbers(line, expected[label])


def check_description(card: str, folder: Path) -> None:
    """Every number of the architecture paragraph is a value of the folder's config.json (or one counted from
    it: a TITE's pooling layers, an infused encoder's copied + new layers); the objective's loss weights are
    the design's, not a setting."""
    config = read(folder, "config.json")
    allowed = config_numbers(folder) | {float(sum(k is not None for k in config.get("kernel_sizes") or [])),
                                        float(config.get("num_copied_layers", 0) + config.get("num_new_layers", 0))}
    stated = numbers(description(card).replace("(each weight 1)", ""))
    assert stated and set(stated) <= allowed, (stated, sorted(allowed))


def lineage(card: str) -> list[str]:
    return [re.sub(r"^\d+\. ", "", line) for line in section(card, "Earlier stages") if re.match(r"^\d+\. ", line)]


def pretraining_stage_numbers(folder: Path) -> list:
    setup, state = read(folder, "pretraining_setup.json"), read(folder, "trainer_state.json")
    return [setup["max_seq_length"], setup["mlm_probability"], state["global_step"]]


def write_beir(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    corpus = {f"d{i}": " ".join(rng.choice(WORDS, size=12)) for i in range(30)}
    queries = {f"q{i}": " ".join(rng.choice(WORDS, size=3)) for i in range(8)}
    qrels = {f"q{i}": f"d{int(rng.integers(0, 30))}" for i in range(8)}
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                                                 for i, t in corpus.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()))
    for split in ("test", "train"):
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels.items()))
    return folder


def run(*argv) -> None:
    assert main([str(a) for a in argv]) == 0, argv


@pytest.fixture(scope="module")
def journey(tmp_path_factory, tok):
    from test_convert_condenser import write_reference_folder

    from dense_encoders.checkpoints import convert_checkpoint
    from dense_encoders.data.bm25 import bm25_run
    from dense_encoders.data.retrieval import load_beir
    from dense_encoders.data.runs import write_trec_run

    base = tmp_path_factory.mktemp("journey")
    beir = write_beir(base / "beir")
    corpus = beir / "corpus.jsonl"
    torch.manual_seed(0)
    BertForSequenceClassification(tiny_bert_config(tok, num_hidden_layers=2)).save_pretrained(base / "ce")
    tok.save_pretrained(base / "ce")
    write_trec_run(bm25_run(load_beir(beir, split="train"), TOP_K), base / "run.trec")
    f = {name: base / name for name in ("cond", "cocond", "dist", "tite", "de", "converted", "shards")}
    run("pretrain", "condenser", "--output-dir", f["cond"], "--max-steps", 2, "--corpus", corpus,
        "--per-device-train-batch-size", 4, "--max-seq-length", 32, "--logging-steps", 1, *CPU)
    run("pretrain", "cocondenser", "--init-from", f["cond"], "--output-dir", f["cocond"], "--max-steps", 2,
        "--corpus", corpus, "--per-device-train-batch-size", 4, "--max-seq-length", 32, "--min-span-tokens", 4,
        "--max-span-tokens", 8, *CPU)
    run("score-teacher", base / "ce", "--run", base / "run.trec", "--data", beir, "--output", base / "teacher.jsonl",
        "--top-k", TOP_K, "--include-texts", "--no-progress")
    run("distill", "--student", f["cocond"], "--train-file", base / "teacher.jsonl", "--output-dir", f["dist"],
        "--max-steps", 2, "--documents-per-query", ASKED_DOCUMENTS, "--per-device-train-batch-size", 4,
        "--losses", "kl", "--logging-steps", 1, *CPU)
    results = {"exact": base / "exact.json", "shards": base / "shards.json", "other": base / "cocond.json"}
    run("evaluate", f["dist"], beir, "--output", results["exact"], "--no-progress")
    try:
        import faiss  # noqa: F401
        results["faiss"] = base / "faiss.json"
        run("evaluate", f["dist"], beir, "--backend", "faiss", "--output", results["faiss"], "--no-progress")
    except ImportError:  # the faiss extra is part of the test extra; without it the exact rows are checked alone
        pass
    run("encode", f["dist"], beir, "--output", f["shards"], "--no-progress")
    run("evaluate", f["dist"], beir, "--corpus-embeddings", f["shards"], "--output", results["shards"], "--no-progress")
    run("evaluate", f["cocond"], beir, "--output", results["other"], "--no-progress")
    run("pretrain", "tite", "--preset", "tiny-tite-2-late", "--output-dir", f["tite"], "--max-steps", 2,
        "--corpus", corpus, "--per-device-train-batch-size", 4, "--max-seq-length", 16, *CPU)
    run("infuse", "--cross-encoder", base / "ce", "--train-data", beir, "--output-dir", f["de"], "--epochs", 1,
        "--batch-size", 8, "--max-length", 32, "--candidates", TOP_K, "--eval-data", beir)
    convert_checkpoint(write_reference_folder(base / "reference", tok), f["converted"])
    return base, f, results


def test_push_refuses_results_of_another_model_naming_both_fingerprints(journey, capsys):
    base, f, results = journey
    theirs = read(results["other"].parent, results["other"].name)["model_fingerprint"]
    ours = read(results["exact"].parent, results["exact"].name)["model_fingerprint"]  # the evaluation of dist
    assert theirs != ours
    capsys.readouterr()
    code = main(["push", str(f["dist"]), "--repo-id", "me/dist", "--results", str(results["exact"]),
                 str(results["other"]), "--token", "hf_notusedtoken1", "--endpoint", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert theirs in err and ours in err and str(results["other"]) in err and "nothing was uploaded" in err


def test_push_accepts_the_folders_own_results(journey, capsys):
    from hub_server import LoopbackHub

    base, f, results = journey
    own = [results[key] for key in ("exact", "faiss", "shards") if key in results]
    with LoopbackHub(token="hf_looptesttoken123") as hub, hub.in_process():
        assert main(["push", str(f["dist"]), "--repo-id", "loopback-user/dist", "--results", *map(str, own),
                     "--token", hub.token, "--endpoint", hub.endpoint]) == 0
        card = hub.repo_files("loopback-user/dist")["README.md"].decode()
    rows = [line for line in section(card, "Results") if line.startswith("| beir |")]
    assert len(rows) == len(own)


def test_distilled_card_and_record_state_the_values_used(journey):
    base, f, _ = journey
    folder = f["dist"]
    positions = read(folder, "config.json")["max_position_embeddings"]
    lines = [json.loads(line) for line in (base / "teacher.jsonl").read_text().splitlines()]
    held = max(len(line["document_ids"]) for line in lines)
    assert held < ASKED_DOCUMENTS and positions < 512  # the journey asks for more than there is
    record = read(folder, "distillation_setup.json")
    assert (record["document_max_length"], record["documents_per_query"]) == (positions, held)
    assert record["requested"] == {"document_max_length": 512, "documents_per_query": ASKED_DOCUMENTS}
    stated = facts((folder / "README.md").read_text())
    assert_numbers(stated["document length"], [positions, 512, positions])
    assert f"{positions} (512 asked" in stated["document length"]
    assert_numbers(stated["documents per query"], [held, ASKED_DOCUMENTS, held])
    assert stated["documents per query"].startswith(f"- documents per query: {held} ")


def test_results_rows_say_how_the_documents_were_searched(journey):
    base, f, results = journey
    manifest = read(f["shards"], "manifest.json")
    dtype = manifest["settings"]["dtype"]
    recorded = {key: read(path.parent, path.name) for key, path in results.items() if key != "other"}
    assert recorded["shards"]["settings"]["corpus_embeddings_dtype"] == dtype == "float16"
    assert recorded["exact"]["settings"]["corpus_embeddings_dtype"] is None
    expected = {"exact": "exact", "faiss": "FAISS IndexFlatIP", "shards": f"exact, {dtype} shards"}
    for key, result in recorded.items():
        assert result["settings"]["search_backend"] == ("faiss" if key == "faiss" else "exact")
        card = str(model_card(f["dist"], results=[results[key]]))
        header, _, row = [line for line in section(card, "Results") if line.startswith("|")][:3]
        cells = dict(zip(*([c.strip() for c in line.strip("|").split("|")] for line in (header, row))))
        assert cells["search"] == expected[key]
        for name, metric in (("nDCG@10", "ndcg@10"), ("MRR@10", "mrr@10"), ("Hits@10", "hits@10")):
            assert float(cells[name]) == pytest.approx(result["metrics"][metric], abs=5e-5)
        assert "exact search" not in card or key == "exact"


def test_distilled_card_names_the_teacher_and_every_earlier_stage(journey, tmp_path):
    base, f, _ = journey
    # the records were copied at training time: the card says it all with the earlier folders gone
    for name in ("cond", "cocond", "ce"):
        (base / name).rename(tmp_path / name)
    try:
        card = str(model_card(f["dist"]))
    finally:
        for name in ("cond", "cocond", "ce"):
            (tmp_path / name).rename(base / name)
    stages = lineage(card)
    assert [re.match(r"`([^`]+)`", line).group(1) for line in stages] == ["cond", "cocond"]
    assert "condenser objective" in stages[0] and "cocondenser objective, continued from `cond`" in stages[1]
    for line, folder in zip(stages, (f["cond"], f["cocond"])):
        assert_numbers(line, pretraining_stage_numbers(folder))
    teacher = facts(card)["teacher"]
    assert "the cross-encoder `ce` (a local folder)" in teacher
    assert_numbers(teacher, [read(base, "teacher.jsonl.meta.json")["top_k"]])
    # the student's own card: the coCondenser lists the Condenser it continued
    cocond = (f["cocond"] / "README.md").read_text()
    assert [re.match(r"`([^`]+)`", line).group(1) for line in lineage(cocond)] == ["cond"]
    for bibtex in ("gao-callan-2021-condenser", "gao-callan-2022-unsupervised", "menon-2022-defense"):
        assert bibtex in card
    # the encoder alone claims no objective: the stages say which ones trained it
    assert "Pre-training objective" not in description(card)


def test_infused_card_reports_its_report_and_cites_the_paper(journey):
    base, f, _ = journey
    folder = f["de"]
    card = (folder / "README.md").read_text()
    report = read(folder, "report.json")
    assert "No evaluation results were recorded" not in card
    table = [line for line in section(card, "Retrieve and rerank") if line.startswith("| DE-")]
    assert len(table) == len(report["rows"]) == 1 and "(this model)" in table[0]
    row = report["rows"][0]
    cells = [c.strip() for c in table[0].strip("|").split("|")][1:]
    expected = [row["retrieve"]["hits@10"], row["retrieve"]["mrr@10"], row["rerank"]["hits@10"],
                row["rerank"]["mrr@10"]]
    assert [float(c) for c in cells[:4]] == pytest.approx(expected, abs=5e-5)
    loaded = model_card(folder)
    by_metric = {r.metric_type: r.metric_value for r in loaded.data.eval_results}
    assert by_metric["accuracy_at_10"] == pytest.approx(row["retrieve"]["hits@10"], abs=5e-5)
    assert "author = {Ananthakrishnan, Haritha and Dolby, Julian and Kokel, Harsha and Samulowitz, Horst and " \
           "Srinivas, Kavitha}" in card and "year = {2025}" in card


def test_no_local_paths_in_cards_or_records(journey):
    base, f, _ = journey
    checked = 0
    for name, folder in f.items():
        if name == "shards":
            continue
        texts = {"README.md": (folder / "README.md").read_text(), "push card": str(model_card(folder))}
        texts.update({p.name: p.read_text() for p in folder.glob("*.json") if p.name in (
            "pretraining_setup.json", "distillation_setup.json", "infusion_setup.json", "earlier_stages.json",
            "conversion.json", "distillation_positives.json", "config.json")})
        for where, text in texts.items():
            assert str(base) not in text and str(base.name) not in text, f"{name}/{where} holds a local path"
            checked += 1
        card = model_card(folder)
        assert not card.data.datasets  # local evaluation folders are no Hub datasets
    assert checked >= 20


@pytest.mark.parametrize("family", ["cond", "cocond", "tite", "dist", "de", "converted"])
def test_every_number_a_card_states_is_in_the_runs_records(journey, family):
    base, f, _ = journey
    folder = f[family]
    card = (folder / "README.md").read_text()
    check_description(card, folder)
    if family == "converted":
        record = read(folder, "conversion.json")
        stated = facts(card, "Conversion")
        assert stated and set(stated) <= {key.replace("_", " ") for key in record}
        for label, line in stated.items():
            assert_numbers(line, numbers(record[label.replace(" ", "_")]))
        assert "Converted from a local folder named `reference`" in card
        return
    if family in ("cond", "cocond", "tite"):
        setup = read(folder, "pretraining_setup.json")
        expected = {**common_training_numbers(folder, card), "pre-training": [], "corpus": [],
                    "sequence length": [setup["max_seq_length"]], "masking rate": [setup["mlm_probability"]]}
        if family == "cocond":
            expected["continued from"] = []
            assert_numbers(lineage(card)[0], pretraining_stage_numbers(f["cond"]))
        else:
            expected["preset"] = numbers(setup["preset"])
        check_facts(card, expected)
        return
    if family == "de":
        setup = read(folder, "infusion_setup.json")
        expected = {setup["model"]: numbers(setup["model"]), "recipe": [], "epochs": [setup["epochs"]],
                    "batch size": [setup["batch_size"]],
                    "learning rate": [setup["learning_rate"]], "warm-up": [setup["warmup_steps"]],
                    "token limit": [setup["max_length"]], "BM25 candidates per query": [setup["candidates"]]}
        check_facts(card, expected)
        return
    setup = read(folder, "distillation_setup.json")
    losses = read(folder, "distillation_losses.json")
    held, positions = setup["documents_per_query"], setup["student_positions"]
    expected = {**common_training_numbers(folder, card), "distillation losses": [], "student initialised from": [],
                "teacher": [read(base, "teacher.jsonl.meta.json")["top_k"]], "document sampling": [],
                "documents per query": [held, setup["requested"]["documents_per_query"], held],
                "query length": [setup["query_max_length"]],
                "document length": [positions, setup["requested"]["document_max_length"], positions]}
    for index, loss in enumerate(losses):
        expected[f"distillation losses/{index}"] = [loss.get("weight", 1), *numbers(loss["citation"]),
                                                    *[v for v in (loss.get("options") or {}).values()]]
    check_facts(card, expected)
    for line, stage in zip(lineage(card), (f["cond"], f["cocond"])):
        assert_numbers(line, pretraining_stage_numbers(stage))


def test_hub_models_are_named_by_id_and_revision(tmp_path, monkeypatch, condenser_folder):
    """A Hub student (a Hub id, or a folder inside the Hugging Face cache) is recorded and carded by its id and
    revision, and is the card's base_model; a local one by its name only, and is none."""
    from huggingface_hub import constants

    from dense_encoders.trainer.records import public_record

    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--loopback-org--student" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    expected = {"name": "loopback-org/student", "hub": True, "revision": revision}
    for given in ("loopback-org/student", str(snapshot)):
        assert public_record({"student": given})["sources"]["student"] == expected
    local = public_record({"student": str(condenser_folder), "train_file": str(tmp_path / "data" / "train.jsonl")})
    assert (local["student"], local["sources"]["student"]["hub"], local["train_file"]) == ("condenser", False,
                                                                                          "train.jsonl")
    record = {"losses": "kl", "train_file": "train.jsonl", "documents_per_query": 4, "sampling": "top",
              "query_max_length": 8, "document_max_length": 16, "teacher": None}
    for student, named, base_model in (("loopback-org/student", f"`loopback-org/student` at revision `{revision[:12]}`",
                                        "loopback-org/student"),
                                       (str(condenser_folder), "`condenser` (a local folder)", None)):
        (condenser_folder / "distillation_setup.json").write_text(json.dumps(public_record({**record,
                                                                                            "student": student})))
        card = model_card(condenser_folder)
        assert facts(str(card))["student initialised from"] == f"- student initialised from: {named}"
        assert card.data.base_model == base_model and str(tmp_path) not in str(card)
