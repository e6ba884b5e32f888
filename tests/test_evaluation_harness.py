"""Encoding (any encoder, prompts, max lengths, cache), evaluate_retrieval, re-ranking, the CLI, SciFact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import dataset_folder, needs_test_data
from transformers import AutoModel, AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

from dense_encoders.cli import main
from dense_encoders.data.retrieval import RetrievalDataset
from dense_encoders.data.runs import read_trec_run
from dense_encoders.evaluation import (
    RetrievalEncoder,
    compute_metrics,
    evaluate_retrieval,
    holm_bonferroni,
    load_results,
    paired_t_test,
)
from dense_encoders.evaluation.harness import compare_systems

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The mitochondrion is the powerhouse of the cell and produces ATP.",
    "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "Python is a high-level programming language known for its readability.",
    "The Great Barrier Reef is the world's largest coral reef system, off Australia.",
    "Insulin is a hormone produced by the pancreas that regulates blood sugar.",
    "The Pacific Ocean is the largest and deepest of Earth's oceans.",
]
QUERIES = {
    "q0": "When was the Eiffel Tower finished?",
    "q1": "how do plants turn sunlight into energy",
    "q2": "which organelle makes ATP",
    "q3": "highest mountain in the world",
    "q4": "hormone that controls blood glucose",
}
QRELS = {"q0": {"d0": 1}, "q1": {"d1": 1}, "q2": {"d2": 2}, "q3": {"d3": 1}, "q4": {"d6": 1}}


@pytest.fixture
def toy_dataset() -> RetrievalDataset:
    return RetrievalDataset(
        name="toy",
        split="test",
        corpus={f"d{i}": {"title": "", "text": text} for i, text in enumerate(DOCUMENTS)},
        queries=dict(QUERIES),
        qrels={q: dict(d) for q, d in QRELS.items()},
    )


def write_beir(folder: Path, dataset: RetrievalDataset) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for doc_id, doc in dataset.corpus.items():
            handle.write(json.dumps({"_id": doc_id, **doc}) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for query_id, text in dataset.queries.items():
            handle.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    (folder / "qrels").mkdir()
    rows = [f"{q}\t{d}\t{s}" for q, docs in dataset.qrels.items() for d, s in docs.items()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return folder


def minilm_reference(path: Path, texts: list[str], max_length: int = 256) -> np.ndarray:
    """all-MiniLM-L6-v2 by hand: transformers AutoModel, mean over real tokens, L2 normalisation."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()


@pytest.mark.numerics
def test_sentence_transformers_model_as_configured(minilm_path):
    encoder = RetrievalEncoder(str(minilm_path), show_progress_bar=False)
    assert encoder.similarity == "cosine" and encoder.max_lengths == {"query": 256, "document": 256}
    documents = encoder.encode_documents(DOCUMENTS)
    np.testing.assert_allclose(documents.embeddings, minilm_reference(minilm_path, DOCUMENTS), atol=1e-5)
    assert not documents.cached and documents.texts_per_second > 0


@pytest.mark.numerics
def test_prompts_and_separate_max_lengths(minilm_path):
    encoder = RetrievalEncoder(
        str(minilm_path), query_prompt="query: ", query_max_length=6, document_max_length=12, show_progress_bar=False
    )
    queries = list(QUERIES.values())
    np.testing.assert_allclose(
        encoder.encode_queries(queries).embeddings,
        minilm_reference(minilm_path, ["query: " + q for q in queries], max_length=6),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        encoder.encode_documents(DOCUMENTS).embeddings, minilm_reference(minilm_path, DOCUMENTS, 12), atol=1e-5
    )
    assert encoder.model.max_seq_length == 256  # restored after each side


@pytest.fixture
def plain_bert(tmp_path, tok):
    """A transformers checkpoint without sentence-transformers files."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path / "plain-bert"
    BertModel(config).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.numerics
def test_plain_checkpoint_needs_a_pooling_and_gets_exactly_it(plain_bert, tok):
    with pytest.raises(ValueError, match=r"no sentence-transformers configuration.*pooling='cls' or pooling='mean'"):
        RetrievalEncoder(str(plain_bert))
    with pytest.raises(ValueError, match=r"pooling='max'"):
        RetrievalEncoder(str(plain_bert), pooling="max")
    model = BertModel.from_pretrained(plain_bert).eval()
    batch = tok(DOCUMENTS, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = {"cls": states[:, 0], "mean": (states * mask).sum(1) / mask.sum(1)}
    for pooling, reference in expected.items():
        encoder = RetrievalEncoder(str(plain_bert), pooling=pooling, show_progress_bar=False)
        np.testing.assert_allclose(encoder.encode_documents(DOCUMENTS).embeddings, reference.numpy(), atol=1e-5)


@pytest.mark.numerics
def test_our_model_without_sentence_transformers_files_uses_its_vector(tmp_path, tok):
    from dense_encoders.models.tite import TiteModel
    from dense_encoders.models.tite.presets import tite_preset

    torch.manual_seed(0)
    model = TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tok))).eval()
    folder = tmp_path / "tite"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    encoder = RetrievalEncoder(str(folder), show_progress_bar=False, document_max_length=16)
    assert encoder.similarity == "dot"
    batch = tok(DOCUMENTS, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).pooler_output
    np.testing.assert_allclose(encoder.encode_documents(DOCUMENTS).embeddings, expected.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="TITE returns one vector per text"):
        RetrievalEncoder(str(folder), pooling="mean")


def test_embedding_cache_skips_re_encoding(minilm_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = RetrievalEncoder(str(minilm_path), cache_dir=cache, show_progress_bar=False).encode_documents(DOCUMENTS)
    assert not first.cached and Path(first.cache_path).is_file()

    encoder = RetrievalEncoder(str(minilm_path), cache_dir=cache, show_progress_bar=False)

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded although the embeddings were cached")

    monkeypatch.setattr(encoder.model, "encode_document", no_encoding)
    second = encoder.encode_documents(DOCUMENTS)
    assert second.cached and second.seconds == 0.0 and second.texts_per_second is None
    np.testing.assert_array_equal(second.embeddings, first.embeddings)
    # another text, another prompt, another length or another side is another key
    keys = {
        encoder.cache_key(DOCUMENTS, "document"),
        encoder.cache_key(DOCUMENTS[:-1] + ["changed"], "document"),
        encoder.cache_key(DOCUMENTS, "query"),
        RetrievalEncoder(str(minilm_path), document_prompt="p: ").cache_key(DOCUMENTS, "document"),
        RetrievalEncoder(str(minilm_path), document_max_length=64).cache_key(DOCUMENTS, "document"),
    }
    assert len(keys) == 5
    # other weights, another key
    other = RetrievalEncoder(str(minilm_path))
    with torch.no_grad():
        next(other.model.parameters()).add_(1e-3)
    assert other.cache_key(DOCUMENTS, "document") != encoder.cache_key(DOCUMENTS, "document")


@pytest.mark.numerics
def test_evaluate_retrieval_end_to_end(minilm_path, toy_dataset, tmp_path):
    folder = write_beir(tmp_path / "toy", toy_dataset)
    results = evaluate_retrieval(
        str(minilm_path), folder, k=5, output=tmp_path / "out" / "results.json",
        run_output=tmp_path / "out" / "run.trec", no_progress=True,
    )
    # independent reference: all scores by hand, ranking by numpy, metrics from the same qrels
    documents = minilm_reference(minilm_path, DOCUMENTS)
    queries = minilm_reference(minilm_path, list(QUERIES.values()))
    scores = queries @ documents.T
    reference_run = {
        query_id: {f"d{j}": float(scores[i, j]) for j in np.argsort(-scores[i])[:5]}
        for i, query_id in enumerate(QUERIES)
    }
    run = read_trec_run(tmp_path / "out" / "run.trec")
    assert {q: list(d) for q, d in run.items()} == {q: list(d) for q, d in reference_run.items()}
    for query_id in QUERIES:
        np.testing.assert_allclose(list(run[query_id].values()), list(reference_run[query_id].values()), atol=1e-5)
    expected_metrics, _ = compute_metrics(QRELS, reference_run)
    assert results.metrics == pytest.approx(expected_metrics, abs=1e-6)
    # the toy queries are easy: every answer is retrieved first
    assert results.metrics["mrr@10"] == pytest.approx(1.0)
    assert set(results.per_query["ndcg@10"]) == set(QUERIES)
    assert results.dataset == {"name": "toy", "split": "test", "source": str(folder.resolve()),
                                  "num_queries": 5, "num_documents": 8}
    assert results.model == str(minilm_path) and results.model_fingerprint == RetrievalEncoder(
        str(minilm_path)).fingerprint
    assert results.settings["similarity"] == "cosine" and results.throughput["documents_per_s"] > 0
    assert load_results(tmp_path / "out" / "results.json").metrics == results.metrics


def test_faiss_backend_gives_the_exact_run(minilm_path, toy_dataset):
    pytest.importorskip("faiss")
    encoder = RetrievalEncoder(str(minilm_path), show_progress_bar=False)
    exact = evaluate_retrieval(encoder, toy_dataset, k=8)
    approximate = evaluate_retrieval(encoder, toy_dataset, k=8, backend="faiss")
    assert approximate.per_query == exact.per_query


@pytest.fixture
def tiny_cross_encoder(tmp_path, tok):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1)
    model = BertForSequenceClassification(config).eval()
    folder = tmp_path / "cross-encoder"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model


@pytest.mark.numerics
def test_rerank_rescores_the_top_k_with_the_cross_encoder(minilm_path, toy_dataset, tiny_cross_encoder, tok):
    folder, model = tiny_cross_encoder
    results = evaluate_retrieval(
        str(minilm_path), toy_dataset, k=8, cross_encoder=str(folder), rerank_top_k=3, no_progress=True
    )
    first_stage = evaluate_retrieval(str(minilm_path), toy_dataset, k=8, no_progress=True)
    assert results.metrics == first_stage.metrics
    rerank = results.rerank
    assert rerank["top_k"] == 3 and rerank["model"] == str(folder)

    # reference: the cross-encoder's logits on each query's first-stage top 3, by hand
    documents = minilm_reference(minilm_path, DOCUMENTS)
    queries = minilm_reference(minilm_path, list(QUERIES.values()))
    reference_run = {}
    for i, (query_id, query) in enumerate(QUERIES.items()):
        top = np.argsort(-(queries[i] @ documents.T))[:3]
        batch = tok([query] * 3, [DOCUMENTS[j] for j in top], padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits[:, 0]
        reference_run[query_id] = {f"d{j}": float(logit) for j, logit in zip(top, logits)}
    expected, expected_per_query = compute_metrics(QRELS, reference_run)
    assert rerank["metrics"] == pytest.approx(expected, abs=1e-6)
    assert rerank["per_query"]["ndcg@10"] == pytest.approx(expected_per_query["ndcg@10"], abs=1e-6)


def test_compare_systems_is_a_paired_t_test_with_holm():
    def fake(name, values):
        return {"dataset": {"name": name}, "per_query": {"ndcg@10": dict(values)}}

    a = [fake("one", {"q1": 0.9, "q2": 0.8, "q3": 0.7}), fake("two", {"x": 0.5, "y": 0.4, "z": 0.9, "w": 0.1})]
    b = [fake("one", {"q1": 0.5, "q2": 0.6, "q3": 0.6}), fake("two", {"x": 0.5, "y": 0.5, "z": 0.7, "w": 0.2})]
    rows = compare_systems(a, b, measure="ndcg@10", alpha=0.05)
    p_values = {}
    for row, ra, rb in zip(rows, a, b):
        t, p = paired_t_test(ra["per_query"]["ndcg@10"], rb["per_query"]["ndcg@10"])
        assert (row["dataset"], row["t"], row["p"]) == (ra["dataset"]["name"], pytest.approx(t), pytest.approx(p))
        p_values[row["dataset"]] = p
    adjusted = holm_bonferroni(p_values, alpha=0.05)
    for row in rows:
        assert (row["p_holm"], row["significant"]) == (pytest.approx(adjusted[row["dataset"]][0]),
                                                       adjusted[row["dataset"]][1])
    assert rows[0]["mean_a"] == pytest.approx(0.8) and rows[0]["mean_b"] == pytest.approx(17 / 30)
    with pytest.raises(ValueError, match="different datasets"):
        compare_systems(a, list(reversed(b)))


def test_compare_systems_keeps_splits_of_one_dataset_apart():
    """Two splits (or graded-pair thresholds) of one dataset are two hypotheses: two rows, Holm over m = 2."""
    def fake(split, values):
        return {"dataset": {"name": "scifact", "split": split}, "per_query": {"ndcg@10": dict(values)}}

    test_a, test_b = {"q1": 0.9, "q2": 0.8, "q3": 0.7}, {"q1": 0.5, "q2": 0.6, "q3": 0.6}
    dev_a, dev_b = {"x": 0.5, "y": 0.4, "z": 0.9, "w": 0.1}, {"x": 0.5, "y": 0.5, "z": 0.7, "w": 0.2}
    rows = compare_systems([fake("test", test_a), fake("dev", dev_a)], [fake("test", test_b), fake("dev", dev_b)])
    assert [(row["dataset"], row["split"]) for row in rows] == [("scifact", "test"), ("scifact", "dev")]
    p_test, p_dev = paired_t_test(test_a, test_b)[1], paired_t_test(dev_a, dev_b)[1]
    low, high = sorted((p_test, p_dev))  # Holm by hand: 2 * smallest, then max(that, 1 * largest)
    by_hand = {p_test: None, p_dev: None}
    by_hand[low], by_hand[high] = min(1.0, 2 * low), max(min(1.0, 2 * low), high)
    assert rows[0]["p_holm"] == pytest.approx(by_hand[p_test]) and rows[1]["p_holm"] == pytest.approx(by_hand[p_dev])
    with pytest.raises(ValueError, match=r"'scifact \(test\)' vs 'scifact \(dev\)'"):
        compare_systems([fake("test", test_a)], [fake("dev", dev_b)])
    with pytest.raises(ValueError, match="given twice"):
        compare_systems([fake("test", test_a)] * 2, [fake("test", test_b)] * 2)


def test_cli_evaluate(minilm_path, toy_dataset, tmp_path, plain_bert, capsys):
    folder = write_beir(tmp_path / "toy", toy_dataset)
    output = tmp_path / "results.json"
    code = main(["evaluate", str(minilm_path), str(folder), "--k", "5", "--output", str(output), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| retrieve | 1.0000 | 1.0000 |" in printed and "documents/s" in printed
    assert load_results(output).metrics["mrr@10"] == pytest.approx(1.0)
    assert main(["evaluate", str(plain_bert), str(folder), "--no-progress"]) == 2
    assert "pass pooling='cls' or pooling='mean'" in capsys.readouterr().err
    assert main(["evaluate", str(minilm_path), str(tmp_path / "missing"), "--no-progress"]) == 2


@pytest.mark.slow
@needs_test_data("beir-scifact")
def test_all_minilm_l6_v2_reproduces_its_mteb_scifact_ndcg(minilm_path, tmp_path):
    """MTEB reports nDCG@10 = 0.6451 for all-MiniLM-L6-v2 on SciFact test (mean pooling, normalised, 256 tokens)."""
    results = evaluate_retrieval(
        str(minilm_path), dataset_folder("beir-scifact")[0], split="test", batch_size=64,
        no_progress=True, output=tmp_path / "scifact.json",
    )
    assert results.dataset["num_queries"] == 300 and results.dataset["num_documents"] == 5183
    assert results.settings["similarity"] == "cosine"
    assert results.settings["max_lengths"] == {"query": 256, "document": 256}
    assert abs(results.metrics["ndcg@10"] - 0.6451) <= 0.005, results.metrics


@pytest.mark.numerics
def test_rerank_score_cache_scores_each_pair_once(toy_dataset, tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    from dense_encoders.evaluation import rerank

    folder, _ = tiny_cross_encoder
    model = CrossEncoder(str(folder), device="cpu")
    scored = []
    original = model.predict
    model.predict = lambda pairs, **kw: scored.append(len(pairs)) or original(pairs, **kw)
    run_a = {"q0": {"d0": 3.0, "d1": 2.0, "d2": 1.0}, "q1": {"d1": 1.0, "d3": 0.5}}
    run_b = {"q0": {"d2": 3.0, "d0": 2.0, "d5": 1.0}, "q1": {"d1": 1.0}}
    cache: dict = {}
    first, _ = rerank(model, toy_dataset, run_a, top_k=3, score_cache=cache, show_progress_bar=False)
    second, _ = rerank(model, toy_dataset, run_b, top_k=3, score_cache=cache, show_progress_bar=False)
    assert scored == [5, 1]  # run_b only adds (q0, d5)
    uncached, _ = rerank(model, toy_dataset, run_b, top_k=3, show_progress_bar=False)
    for query_id in run_b:
        assert second[query_id] == pytest.approx(uncached[query_id], abs=1e-6)
    assert second["q0"]["d0"] == first["q0"]["d0"]


BUNDLED_BEIR = REPO_ROOT / "src" / "dense_encoders" / "resources" / "quickstart_beir"


def test_evaluate_bm25_writes_bm25s_run_and_its_metrics(tmp_path, capsys):
    """docs/distillation.md: ``evaluate bm25 DATA --split train --k K --run-output FILE`` makes the first stage that
    ``score-teacher --run`` scores. Reference: bm25s itself (English stopwords) on the BEIR files read here, and
    ir-measures on that run."""
    import bm25s
    import ir_measures

    run_file, results_file = tmp_path / "bm25.train.trec", tmp_path / "bm25.json"
    code = main(["evaluate", "bm25", str(BUNDLED_BEIR), "--split", "train", "--k", "10", "--run-output", str(run_file),
                 "--output", str(results_file), "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0 and "bm25 on quickstart_beir (train)" in printed and "BM25 (bm25s" in printed
    documents = [json.loads(line) for line in (BUNDLED_BEIR / "corpus.jsonl").read_text().splitlines()]
    texts = [f"{d['title'].strip()} {d['text'].strip()}".strip() for d in documents]  # title + " " + text
    qrels = {}
    for line in (BUNDLED_BEIR / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        query, document, grade = line.split("\t")
        qrels.setdefault(query, {})[document] = int(grade)
    queries = {q["_id"]: q["text"] for q in map(json.loads, (BUNDLED_BEIR / "queries.jsonl").read_text().splitlines())}
    query_ids = sorted(qrels)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    indices, scores = retriever.retrieve(bm25s.tokenize([queries[q] for q in query_ids], stopwords="en",
                                                        show_progress=False), k=10, show_progress=False)
    expected = {q: {documents[int(j)]["_id"]: float(s) for j, s in zip(indices[row], scores[row])}
                for row, q in enumerate(query_ids)}
    run = read_trec_run(run_file)
    assert run.keys() == expected.keys()
    for query in expected:
        assert run[query].keys() == expected[query].keys(), query
        assert run[query] == pytest.approx(expected[query], rel=1e-5)
    results = load_results(results_file)
    measures = {"ndcg@10": ir_measures.nDCG @ 10, "mrr@10": ir_measures.RR @ 10, "recall@100": ir_measures.R @ 100,
                "hits@10": ir_measures.Success @ 10}
    reference = ir_measures.calc_aggregate(measures.values(), qrels, run)
    for name, measure in measures.items():
        assert results.metrics[name] == pytest.approx(reference[measure]), name
    assert results.model == "bm25" and results.settings["similarity"] == "bm25"


def test_evaluate_bm25_refuses_an_encoders_settings(tmp_path, capsys):
    code = main(["evaluate", "bm25", str(BUNDLED_BEIR), "--pooling", "cls", "--query-prompt", "q: ", "--runtime",
                 "openvino", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--pooling, --query-prompt, --runtime:" in err, err
    assert "bm25" in err
