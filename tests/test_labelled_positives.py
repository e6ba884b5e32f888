"""Labelled positives P for M3SE and RankDistil-B (Menon et al. 2022, In Defense of Dual-Encoders for Neural
Ranking): the training file's ``relevance`` field and ``--qrels``, sampling that keeps a judged positive, the
collator's ``positives`` with its teacher's-best fallback, the trainer's loss against a hand computation,
and what ``distill`` records (counts, model card)."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import torch
from conftest import FLOAT64_TOLERANCE
from test_distillation_trainer import make_records, tiny_bert

from dense_encoders.cli import main
from dense_encoders.data.distillation import (
    DistillationCollator,
    read_training_file,
    sample_documents,
    training_records_to_dataset,
    uses_labelled_positives,
)
from dense_encoders.data.format import DataFormatError
from dense_encoders.data.retrieval import read_qrels
from dense_encoders.trainer.distillation import (
    DistillationArguments,
    DistillationSetup,
    DistillationTrainer,
    DualEncoder,
)
from dense_encoders.trainer.losses import DistillationObjective


def write_lines(path, records, keys=("query_id", "query", "document_ids", "documents", "scores", "relevance")):
    path.write_text("".join(json.dumps({k: r[k] for k in keys if k in r}) + "\n" for r in records))
    return path


def labelled_records():
    """4 queries x 6 documents (teacher order = file order): a judged positive at the teacher's rank 6, two
    judged positives (grades 1 and 2) inside the top 4, nothing judged, everything judged."""
    records = make_records(num_queries=4, num_documents=6, seed=3)
    grades = [[0, 0, 0, 0, 0, 1], [0, 1, 0, 2, 0, 0], [0] * 6, [1] * 6]
    for record, relevance in zip(records, grades):
        record["relevance"] = relevance
    return records


# ---------------------------------------------------------------------------- the training file


def test_relevance_field_is_read_and_validated(tmp_path):
    records = labelled_records()
    path = write_lines(tmp_path / "train.jsonl", records)
    read = read_training_file(path)
    assert [r["relevance"] for r in read] == [r["relevance"] for r in records]
    unlabelled = write_lines(tmp_path / "plain.jsonl", records, keys=("query", "documents", "scores"))
    assert all(r["relevance"] is None for r in read_training_file(unlabelled))
    # integral floats are grades too (qrels readers accept "1.0" as well)
    line = {"query": "q", "documents": ["a", "b"], "scores": [1.0, 0.0], "relevance": [0, 2.0]}
    (tmp_path / "float.jsonl").write_text(json.dumps(line) + "\n")
    assert read_training_file(tmp_path / "float.jsonl")[0]["relevance"] == [0, 2]
    bad_cases = [
        ([0], r"bad.jsonl:2: 1 relevance grades for 2 documents"),
        ([0, 1.5], r"bad.jsonl:2: relevance grade 2 is not an integer: 1.5"),
        ([0, "1"], r"bad.jsonl:2: relevance grade 2 is not an integer: '1'"),
        ([True, 0], r"bad.jsonl:2: relevance grade 1 is not an integer: True"),
        ([0, -1], r"bad.jsonl:2: relevance grade 2 is negative: -1"),
        ("1 0", r"bad.jsonl:2: 'relevance' must be a list of grades, got str"),
    ]
    for relevance, message in bad_cases:
        bad = dict(line, relevance=relevance)
        (tmp_path / "bad.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataFormatError, match=message) as error:
            read_training_file(tmp_path / "bad.jsonl")
        assert "\n" not in str(error.value)


def write_beir_qrels(path, qrels):
    rows = [f"{q}\t{d}\t{g}" for q, judged in qrels.items() for d, g in judged.items()]
    path.write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return path


def write_trec_qrels(path, qrels):
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, judged in qrels.items() for d, g in judged.items()))
    return path


QRELS = {"q0": {"q0d5": 1, "q0d1": 0, "elsewhere": 3}, "q1": {"q1d1": 1, "q1d3": 2}, "q3": {"q3d0": 2}}


@pytest.mark.parametrize("writer", [write_beir_qrels, write_trec_qrels])
def test_qrels_grade_the_lines_by_their_ids(tmp_path, writer, caplog):
    records = labelled_records()
    qrels_file = writer(tmp_path / ("qrels.tsv" if writer is write_beir_qrels else "qrels.txt"), QRELS)
    assert read_qrels(qrels_file) == QRELS
    plain = write_lines(tmp_path / "train.jsonl", records, keys=("query_id", "query", "document_ids", "documents",
                                                                  "scores"))
    read = read_training_file(plain, qrels=qrels_file)
    for record in read:  # the reference: a dictionary look-up per document
        judged = QRELS.get(record["query_id"], {})
        assert record["relevance"] == [judged.get(doc_id, 0) for doc_id in record["document_ids"]]
    assert read[0]["relevance"] == [0, 0, 0, 0, 0, 1] and read[2]["relevance"] == [0] * 6
    # qrels and a relevance field: the qrels win, with one warning naming the lines
    labelled = write_lines(tmp_path / "labelled.jsonl", records)
    with caplog.at_level(logging.WARNING):
        read = read_training_file(labelled, qrels=qrels_file)
    assert read[3]["relevance"] == [2, 0, 0, 0, 0, 0]
    assert re.search(r"labelled.jsonl: 4 line\(s\) carry a 'relevance' field \(first at line 1\); the qrels "
                     r"qrels.t.. replace them", caplog.text)


def test_qrels_errors_name_the_file_and_line(tmp_path):
    records = labelled_records()
    qrels_file = write_beir_qrels(tmp_path / "qrels.tsv", QRELS)
    no_ids = write_lines(tmp_path / "no-ids.jsonl", records[:1] + [dict(records[1], query_id=None)],
                         keys=("query_id", "query", "documents", "scores"))
    with pytest.raises(DataFormatError, match=r"no-ids.jsonl:1: no 'document_ids' to look up in the qrels qrels.tsv"):
        read_training_file(no_ids, qrels=qrels_file)
    no_query_id = write_lines(tmp_path / "no-qid.jsonl", [records[0], {k: v for k, v in records[1].items()
                                                                      if k != "query_id"}])
    with pytest.raises(DataFormatError, match=r"no-qid.jsonl:2: no 'query_id' to look up in the qrels") as error:
        read_training_file(no_query_id, qrels=qrels_file)
    assert "\n" not in str(error.value)
    other = write_beir_qrels(tmp_path / "other.tsv", {"x1": {"q0d0": 1}})
    with pytest.raises(ValueError, match=r"the qrels other.tsv judge none of the 4 queries of .*train.jsonl"):
        read_training_file(write_lines(tmp_path / "train.jsonl", records), qrels=other)
    odd = tmp_path / "odd.qrels"
    odd.write_text("\nq0 q0d0\n")
    with pytest.raises(DataFormatError, match=r"odd.qrels:2: expected BEIR qrels .* or TREC qrels .*got 2 column"):
        read_qrels(odd)
    with pytest.raises(ValueError, match="--relevance-level 0: give a grade >= 1"):
        DistillationSetup(student="s", train_file="t.jsonl", relevance_level=0)


# ---------------------------------------------------------------------------- sampling and the batch


def test_sampling_keeps_the_teacher_highest_judged_positive():
    scores = [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]
    judged = [False, False, False, False, False, True, False, True]  # the highest judged: index 5 (rank 6)
    assert sample_documents(scores, 3, "top", positives=judged) == [0, 1, 5]
    assert sample_documents(scores, 2, "random", positives=judged) == [0, 5]
    assert sample_documents(scores, 1, "random", positives=judged) == [0]  # one slot: the teacher's best
    for strategy in ("random", "log-random"):
        for seed in range(50):
            chosen = sample_documents(scores, 4, strategy, torch.Generator().manual_seed(seed), positives=judged)
            assert len(set(chosen)) == 4 and chosen[0] == 0 and 5 in chosen and chosen == sorted(chosen)
    # labels that do not move the sample (nothing judged, or the teacher's best judged) keep it bit-identical
    for strategy in ("top", "random", "log-random"):
        for seed in range(20):
            plain = sample_documents(scores, 4, strategy, torch.Generator().manual_seed(seed))
            for flags in ([False] * 8, [True] + [False] * 7, [True] * 8):
                assert sample_documents(scores, 4, strategy, torch.Generator().manual_seed(seed),
                                        positives=flags) == plain
    with pytest.raises(ValueError, match="2 positive flags for 8 documents"):
        sample_documents(scores, 4, positives=[True, False])


def test_random_sampling_with_a_kept_positive_draws_the_rest_uniformly():
    scores = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    judged = [False, False, False, True, False, False]  # index 3 kept besides index 0
    generator = torch.Generator().manual_seed(0)
    counts = {i: 0 for i in range(6)}
    for _ in range(3000):
        for index in sample_documents(scores, 3, "random", generator, positives=judged):
            counts[index] += 1
    assert counts[0] == counts[3] == 3000
    assert all(abs(counts[i] - 750) < 5 * np.sqrt(750) for i in (1, 2, 4, 5))  # one of 4 each draw


def positives_of(collator, records):
    return collator([training_records_to_dataset(records)[i] for i in range(len(records))])


def test_collator_positives_and_the_teachers_best_fallback(tok):
    records = labelled_records()
    collator = DistillationCollator(tok, documents_per_query=4, sampling="top", seed=0, query_max_length=8,
                                    document_max_length=16)
    batch = positives_of(collator, records)
    # sampled: q0 keeps its rank-6 positive; q1 two judged; q2 none judged -> fallback; q3 all judged -> fallback
    assert torch.equal(batch["teacher_scores"][0], torch.tensor([records[0]["scores"][i] for i in (0, 1, 2, 5)]))
    assert batch["positives"].tolist() == [[False, False, False, True], [False, True, False, True],
                                           [True, False, False, False], [True, False, False, False]]
    # relevance level 2: only q1's grade-2 document, and q0/q3 (grade 1) fall back
    strict = DistillationCollator(tok, documents_per_query=4, sampling="top", seed=0, relevance_level=2)
    assert positives_of(strict, records)["positives"].tolist() == [
        [True, False, False, False], [False, False, False, True], [True, False, False, False],
        [True, False, False, False]]
    # padded slots are never positives; a query with fewer documents than slots keeps all of them
    short = dict(records[0], documents=records[0]["documents"][4:], scores=records[0]["scores"][4:],
                 relevance=[1, 0])
    batch = collator([short])
    assert batch["document_mask"].tolist() == [[True, True, False, False]]
    assert batch["positives"].tolist() == [[True, False, False, False]]  # the judged one IS the teacher's best
    # no labels in the run: no positives in the batch
    plain = [{k: v for k, v in r.items() if k != "relevance"} for r in records]
    assert "positives" not in positives_of(collator, plain)
    assert "relevance" not in training_records_to_dataset(plain).column_names
    # a labelled run where one line has no grades: it falls back, the batch still carries positives
    mixed = plain[:1] + records[1:2]
    dataset = training_records_to_dataset(mixed)
    assert dataset[0]["relevance"] == [0] * 6
    assert positives_of(collator, mixed)["positives"].tolist() == [[True, False, False, False],
                                                                   [False, True, False, True]]
    with pytest.raises(ValueError, match="relevance_level=0: give a grade >= 1"):
        DistillationCollator(tok, relevance_level=0)


def test_labelled_random_sampling_is_seeded_per_example(tok):
    records = make_records(num_queries=3, num_documents=20, seed=5)
    for q, record in enumerate(records):
        record["relevance"] = [1 if i == 17 - q else 0 for i in range(20)]
    dataset = training_records_to_dataset(records)
    examples = [dataset[i] for i in range(3)]
    collator = DistillationCollator(tok, documents_per_query=4, sampling="log-random", seed=7)
    first = collator(examples)
    again = DistillationCollator(tok, documents_per_query=4, sampling="log-random", seed=7)(examples)
    for key in ("teacher_scores", "positives", "document_input_ids"):
        assert torch.equal(first[key], again[key]), key
    for q, record in enumerate(records):  # the judged positive is sampled and is P
        position = first["teacher_scores"][q].tolist().index(np.float32(record["scores"][17 - q]))
        assert first["positives"][q].tolist() == [i == position for i in range(4)]
    collator.set_epoch(1)
    assert not torch.equal(collator(examples)["teacher_scores"], first["teacher_scores"])


def test_counted_queries_follow_the_collators_rule():
    records = labelled_records()
    assert [uses_labelled_positives(r, 4) for r in records] == [True, True, False, False]
    assert [uses_labelled_positives(r, 4, relevance_level=2) for r in records] == [False, True, False, False]
    assert not any(uses_labelled_positives(r, 1) for r in records)  # one document: no negative left
    assert not uses_labelled_positives(dict(records[0], relevance=None), 4)


def test_labels_only_reach_the_losses_that_take_a_positive_set(tmp_path, caplog):
    from dense_encoders.trainer.distillation import _drop_unused_labels, positives_record

    train = write_lines(tmp_path / "train.jsonl", labelled_records())
    setup = DistillationSetup(student="s", train_file=str(train), losses="rankdistil_b+kl")
    records = read_training_file(train)
    _drop_unused_labels(setup, records)
    assert positives_record(setup, records) == {
        "losses": ["rankdistil_b"], "source": "the 'relevance' field of train.jsonl", "relevance_level": 1,
        "queries": 4, "labelled_queries": 2, "teacher_best_queries": 2}
    # no loss takes P: the labels are dropped (sampling stays label-free), --qrels warns that it is unused
    setup = DistillationSetup(student="s", train_file=str(train), losses="margin_mse+kl", qrels="qrels.tsv")
    with caplog.at_level(logging.WARNING):
        _drop_unused_labels(setup, records)
    assert "--qrels qrels.tsv is unused: only m3se and rankdistil_b take judged positives" in caplog.text
    assert all(r["relevance"] is None for r in records)
    assert "relevance" not in training_records_to_dataset(records).column_names
    assert positives_record(setup, records) == {"losses": [], "source": None, "relevance_level": None,
                                                "queries": 4, "labelled_queries": 0, "teacher_best_queries": 4}


# ---------------------------------------------------------------------------- the trainer's loss, by hand


def hand_m3se(s, t, positive, real):
    """[DE] Eq. 4 with explicit P: sum_{i in P} ((t_i - t_j*) - (s_i - s_j*))^2 + sum_{j in N} relu(s_j - s_j*)^2,
    j* the negative of highest teacher score (first on ties)."""
    negatives = [j for j in range(len(s)) if real[j] and not positive[j]]
    j_star = negatives[0]
    for j in negatives:
        if t[j] > t[j_star]:
            j_star = j
    total = 0.0
    for i in range(len(s)):
        if positive[i]:
            total += ((t[i] - t[j_star]) - (s[i] - s[j_star])) ** 2
    for j in negatives:
        total += max(0.0, s[j] - s[j_star]) ** 2
    return total


def hand_rankdistil_b(s, t, positive, real, gamma):
    """RankDistil-B ([DE] Sec. 4.3): sum_{i in P} (t_i - s_i)^2 + sum_{j in N} relu(s_j - gamma)^2."""
    total = 0.0
    for i in range(len(s)):
        if not real[i]:
            continue
        total += (t[i] - s[i]) ** 2 if positive[i] else max(0.0, s[i] - gamma) ** 2
    return total


def teacher_best(t, real):
    best = max((i for i in range(len(t)) if real[i]), key=lambda i: (t[i], -i))
    return [i == best for i in range(len(t))]


@pytest.mark.numerics
def test_trainer_loss_is_m3se_and_rankdistil_b_of_the_labelled_positives(tmp_path, tok):
    records = labelled_records()
    records.append(dict(make_records(num_queries=5, num_documents=3, seed=9)[4], relevance=[0, 0, 1]))  # padded
    gamma = 0.25
    args = DistillationArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=5, max_steps=1,
                                 use_cpu=True, report_to="none", seed=0)
    collator = DistillationCollator(tok, documents_per_query=4, sampling="top", seed=0, query_max_length=8,
                                    document_max_length=16)
    encoder = tiny_bert(tok, dtype=torch.float64)
    objective = DistillationObjective("m3se+rankdistil_b:0.5", {"rankdistil_b": {"gamma": gamma}})
    trainer = DistillationTrainer(model=DualEncoder(encoder, "cls", "dot"), args=args,
                                  train_dataset=training_records_to_dataset(records), data_collator=collator,
                                  processing_class=tok, objective=objective)
    batch = positives_of(collator, records)
    # the explicit P of the labels (teacher order of the sampled documents), written out
    expected_positives = [[False, False, False, True], [False, True, False, True], [True, False, False, False],
                          [True, False, False, False], [False, False, True, False]]
    assert batch["positives"].tolist() == expected_positives
    loss = trainer.compute_loss(trainer.model, batch)
    plain = {k: v for k, v in batch.items() if k != "positives"}
    default_loss = trainer.compute_loss(trainer.model, plain)

    with torch.no_grad():
        q = encoder(input_ids=batch["query_input_ids"],
                    attention_mask=batch["query_attention_mask"]).last_hidden_state[:, 0].numpy()
        d = encoder(input_ids=batch["document_input_ids"],
                    attention_mask=batch["document_attention_mask"]).last_hidden_state[:, 0].numpy()
    teacher = batch["teacher_scores"].double().numpy()
    real = batch["document_mask"].tolist()

    def hand_loss(positive_sets):
        total = 0.0
        for query in range(5):
            s = [float(np.dot(q[query], d[query * 4 + k])) for k in range(4)]
            t = [float(x) for x in teacher[query]]
            total += hand_m3se(s, t, positive_sets[query], real[query])
            total += 0.5 * hand_rankdistil_b(s, t, positive_sets[query], real[query], gamma)
        return total / 5

    expected = hand_loss(expected_positives)
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss.detach(), torch.tensor(expected, dtype=torch.float64), **FLOAT64_TOLERANCE)
    # without labels P is the teacher's best: the hand value of that P, and a different loss
    fallback = [teacher_best(list(teacher[query]), real[query]) for query in range(5)]
    torch.testing.assert_close(default_loss.detach(), torch.tensor(hand_loss(fallback), dtype=torch.float64),
                               **FLOAT64_TOLERANCE)
    assert abs(expected - hand_loss(fallback)) > 1e-3
    # the fallback queries (2, 3) contribute the same under both: only the labelled ones moved
    assert fallback[2] == expected_positives[2] and fallback[3] == expected_positives[3]
    assert set(trainer.loss_parts.sums) == {"m3se_loss", "rankdistil_b_loss"}


# ---------------------------------------------------------------------------- the command line


def distill_argv(student, train_file, output, *extra):
    return ["distill", "--student", str(student), "--train-file", str(train_file), "--output-dir", str(output),
            "--losses", "m3se", "--pooling", "cls", "--documents-per-query", "4", "--sampling", "top",
            "--per-device-train-batch-size", "4", "--max-steps", "1", "--use-cpu", "--logging-steps", "1",
            "--query-max-length", "8", "--document-max-length", "16", *extra]


@pytest.mark.slow
def test_cli_distill_with_qrels_records_the_positive_sets(tmp_path, tok, capsys):
    student = tmp_path / "student"
    tiny_bert(tok).save_pretrained(student)
    tok.save_pretrained(student)
    train = write_lines(tmp_path / "train.jsonl", labelled_records(),
                        keys=("query_id", "query", "document_ids", "documents", "scores"))
    qrels = write_beir_qrels(tmp_path / "qrels.tsv", QRELS)
    output = tmp_path / "labelled"
    assert main(distill_argv(student, train, output, "--qrels", str(qrels), "--relevance-level", "1")) == 0
    recorded = json.loads((output / "distillation_positives.json").read_text())
    # q0 (q0d5 = 1), q1 (q1d1 = 1, q1d3 = 2) and q3 (q3d0 = 2) hold a judged positive and negatives; q2 nothing judged
    assert recorded == {"losses": ["m3se"], "source": "qrels.tsv", "relevance_level": 1, "queries": 4,
                        "labelled_queries": 3, "teacher_best_queries": 1}
    setup = json.loads((output / "distillation_setup.json").read_text())
    assert setup["qrels"] == qrels.name and setup["relevance_level"] == 1  # named, no local path
    card = (output / "README.md").read_text()
    assert ("- P (M3SE): judged positives from qrels.tsv (relevance >= 1) for 3 of 4 queries; the teacher's best "
            "document for the other 1") in card
    # TREC qrels and level 2: only q1 (grade 2) and q3 (grade 2) keep a labelled P
    trec = write_trec_qrels(tmp_path / "qrels.txt", QRELS)
    output2 = tmp_path / "level2"
    assert main(distill_argv(student, train, output2, "--qrels", str(trec), "--relevance_level", "2",
                             "--losses", "m3se+rankdistil_b")) == 0
    card = (output2 / "README.md").read_text()
    assert ("- P (M3SE / RankDistil-B): judged positives from qrels.txt (relevance >= 2) for 2 of 4 queries; "
            "the teacher's best document for the other 2") in card
    # no labels: the card says so
    output3 = tmp_path / "plain"
    assert main(distill_argv(student, train, output3)) == 0
    assert "- P (M3SE): the teacher's best document (no relevance labels)" in (output3 / "README.md").read_text()
    # a line without ids under --qrels: a one-line error naming file:line, exit 2
    no_ids = write_lines(tmp_path / "no-ids.jsonl", labelled_records(), keys=("query", "documents", "scores"))
    capsys.readouterr()
    assert main(distill_argv(student, no_ids, tmp_path / "x", "--qrels", str(qrels))) == 2
    assert re.search(r"no-ids.jsonl:1: no 'query_id' to look up in the qrels qrels.tsv", capsys.readouterr().err)
    assert main(distill_argv(student, train, tmp_path / "y", "--relevance-level", "0")) == 2
    assert "--relevance-level 0: give a grade >= 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.numerics
def test_two_processes_with_labelled_positives_equal_one_process(tmp_path, tok):
    """The positives of every process are gathered with the scores: DDP (gloo, 2 x 2 queries) takes the step of
    one process on the 4 queries (float64 end to end: see conftest)."""
    import subprocess
    import sys

    from conftest import REPO_ROOT, cpu_only_env
    from safetensors.torch import load_file

    student = tmp_path / "student64"
    tiny_bert(tok, dtype=torch.float64).save_pretrained(student)
    tok.save_pretrained(student)
    train = write_lines(tmp_path / "train.jsonl", labelled_records())
    extra = ("--losses", "m3se+rankdistil_b", "--learning-rate", "0.5", "--optim", "sgd", "--lr-scheduler-type",
             "constant", "--warmup-steps", "0")
    one = tmp_path / "one"
    assert main(distill_argv(student, train, one, *extra)) == 0
    two = tmp_path / "two"
    argv = distill_argv(student, train, two, *extra, "--per-device-train-batch-size", "2", "--ddp-backend", "gloo")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "dense_encoders.cli", *argv]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env=cpu_only_env(PYTHONPATH=str(REPO_ROOT / "src")))
    assert result.returncode == 0, result.stderr[-6000:]
    log_one = json.loads((one / "trainer_state.json").read_text())["log_history"][0]
    log_two = json.loads((two / "trainer_state.json").read_text())["log_history"][0]
    assert log_two["loss"] == pytest.approx(log_one["loss"], rel=1e-6)  # logged through a float32 sum
    weights_one, weights_two = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    initial = load_file(student / "model.safetensors")
    assert max((weights_one[k] - initial[k]).abs().max().item() for k in initial) > 1e-3
    for name, value in weights_one.items():
        torch.testing.assert_close(weights_two[name], value, **FLOAT64_TOLERANCE, msg=name)
    assert json.loads((two / "distillation_positives.json").read_text())["labelled_queries"] == 2
