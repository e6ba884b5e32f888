"""Cross-encoder embeddings (*Can Cross Encoders Produce Useful Sentence Embeddings?*): layer-wise embeddings,
infused dual encoders, their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import float32_atol
from conftest import tiny_bert_config as tiny_config
from transformers import AutoModelForSequenceClassification, BertForSequenceClassification, BertModel

from dense_encoders import InfusedDualEncoderConfig, InfusedDualEncoderModel
from dense_encoders.evaluation.layerwise import dual_encoder_layerwise_embeddings, layerwise_embeddings
from dense_encoders.trainer.infusion import infuse, save_dual_encoder

TEXTS = ["dense retrieval with cross encoders", "a", "which layer of the cross encoder embeds best?"]


@pytest.fixture
def cross_encoder_folder(tmp_path, tok):
    torch.manual_seed(0)
    folder = tmp_path / "ce"
    BertForSequenceClassification(tiny_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.numerics
def test_layerwise_embeddings_match_a_by_hand_reference(cross_encoder_folder, tok):
    model = AutoModelForSequenceClassification.from_pretrained(cross_encoder_folder).eval()
    special = set(tok.all_special_ids)
    for copies in ("both", "first"):
        got = layerwise_embeddings(str(cross_encoder_folder), TEXTS, copies=copies, batch_size=2)
        assert sorted(got) == [0, 1, 2, 3]
        for i, text in enumerate(TEXTS):  # one pair at a time, no padding at all
            encoded = tok(text, text, return_tensors="pt")
            with torch.no_grad():
                hidden = model.bert(**encoded, output_hidden_states=True).hidden_states
            ids = encoded["input_ids"][0].tolist()
            first_sep = ids.index(tok.sep_token_id)
            positions = [p for p, t in enumerate(ids) if t not in special and (copies == "both" or p < first_sep)]
            for layer in range(4):
                expected = hidden[layer][0, positions].mean(0).numpy()
                np.testing.assert_allclose(got[layer][i], expected, atol=1e-5, err_msg=f"{copies} layer {layer}")
    both, first = layerwise_embeddings(str(cross_encoder_folder), TEXTS, layers=[2]), layerwise_embeddings(
        str(cross_encoder_folder), TEXTS, layers=[2], copies="first")
    assert not np.allclose(both[2], first[2], atol=1e-4)  # the copies see each other: not the same states


@pytest.mark.numerics
def test_dual_encoder_layerwise_embeddings(tok):
    torch.manual_seed(0)
    model = BertModel(tiny_config(tok), add_pooling_layer=False).eval()
    got = dual_encoder_layerwise_embeddings(model, TEXTS, layers=[0, -1], tokenizer=tok)
    assert sorted(got) == [0, 3]
    for i, text in enumerate(TEXTS):
        encoded = tok(text, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**encoded, output_hidden_states=True).hidden_states
        np.testing.assert_allclose(got[3][i], hidden[3][0, 1:-1].mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(got[0][i], hidden[0][0, 1:-1].mean(0).numpy(), atol=1e-5)


def test_dual_encoder_layerwise_embeddings_refuse_a_tite_that_pools_between_layers(tok):
    """A TITE's pooled layers hold fewer positions than the text has tokens: no per-token states to mean-pool, one
    line naming the layer (before: an error from the shapes, deep in mean_pool)."""
    from dense_encoders.models.tite import TiteModel, tite_preset

    torch.manual_seed(0)
    model = TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).eval()
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "iota kappa lambda mu"]
    with pytest.raises(ValueError, match=r"^layer 3 of the dual encoder \(TiteModel\) holds \d+ positions for \d+ "
                       r"tokens: it pools between layers"):
        dual_encoder_layerwise_embeddings(model, texts, layers=[3], tokenizer=tok, max_length=16)


def test_infused_dual_encoder_copies_the_cross_encoder_exactly(cross_encoder_folder):
    ce = AutoModelForSequenceClassification.from_pretrained(cross_encoder_folder)
    de, _ = infuse(str(cross_encoder_folder))  # DE-2-CE: 1 copied + 1 new
    assert isinstance(de, InfusedDualEncoderModel) and de.config.num_hidden_layers == 2
    assert de.config.infused_from == cross_encoder_folder.name  # named, never by a local path (config.json goes up)
    for name, tensor in ce.bert.embeddings.state_dict().items():
        assert torch.equal(de.embeddings.state_dict()[name], tensor), name
    for name, tensor in ce.bert.encoder.layer[0].state_dict().items():
        assert torch.equal(de.encoder.layer[0].state_dict()[name], tensor), name
    new = de.encoder.layer[1].attention.self.query.weight
    assert not torch.equal(new, ce.bert.encoder.layer[1].attention.self.query.weight)
    assert new.std().item() == pytest.approx(ce.config.initializer_range, rel=0.2)  # freshly initialised

    three, _ = infuse(str(cross_encoder_folder), num_copied_layers=3, num_new_layers=0)  # DE-3-CE
    for index in range(3):
        for name, tensor in ce.bert.encoder.layer[index].state_dict().items():
            assert torch.equal(three.encoder.layer[index].state_dict()[name], tensor), (index, name)

    rand, _ = infuse(str(cross_encoder_folder), random_init=True, seed=1)  # DE-2-Rand
    assert rand.config.infused_from is None and rand.config.num_hidden_layers == 2
    assert not torch.equal(rand.embeddings.word_embeddings.weight, ce.bert.embeddings.word_embeddings.weight)
    assert not torch.equal(rand.encoder.layer[0].output.dense.weight, ce.bert.encoder.layer[0].output.dense.weight)


@pytest.mark.numerics
def test_infused_embeddings_are_padding_invariant_mean_pools(cross_encoder_folder, tok):
    de, _ = infuse(str(cross_encoder_folder))
    de.eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        together = de(**batch)
        for i, text in enumerate(TEXTS):
            alone = de(**tok(text, return_tensors="pt"))
            torch.testing.assert_close(together.pooler_output[i], alone.pooler_output[0], atol=1e-5, rtol=1e-5)
            # the same mean summed in another order: a few ulps of the largest state (conftest.float32_atol)
            torch.testing.assert_close(alone.pooler_output[0], alone.last_hidden_state[0].mean(0),
                                       atol=float32_atol(alone.last_hidden_state), rtol=0)


@pytest.mark.parametrize("where", ["call", "config"])
def test_infused_return_dict_false_gives_a_tuple_as_bert_model_does(tok, where):
    torch.manual_seed(0)
    settings = tiny_config(tok).to_dict()
    for key in ("architectures", "model_type", "num_hidden_layers", "num_labels", "id2label", "label2id"):
        settings.pop(key, None)
    model = InfusedDualEncoderModel(InfusedDualEncoderConfig(**settings)).eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(**batch, return_dict=True)
        if where == "config":
            model.config.return_dict = False
        output = model(**batch, return_dict=False) if where == "call" else model(**batch)
        assert isinstance(model(**batch, return_dict=True), type(reference))  # the keyword wins over the config
    assert isinstance(output, tuple) and len(output) == 2
    states, pooled = output
    assert torch.equal(states, reference.last_hidden_state) and torch.equal(pooled, reference.pooler_output)
    mask = batch["attention_mask"].unsqueeze(-1).float()  # the mean over each text's tokens, by hand
    torch.testing.assert_close(pooled, (states * mask).sum(1) / mask.sum(1), atol=float32_atol(states), rtol=0)


@pytest.mark.numerics
@pytest.mark.slow
def test_infused_folder_loads_as_remote_code_and_in_sentence_transformers(cross_encoder_folder, tok, tmp_path):
    from conftest import run_python_without_package

    de, tokenizer = infuse(str(cross_encoder_folder))
    folder = save_dual_encoder(de.eval(), tokenizer, tmp_path / "de-2-ce")
    assert {"configuration_infused.py", "modeling_infused.py", "modules.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["auto_map"]["AutoModel"] == \
        "modeling_infused.InfusedDualEncoderModel"
    with torch.no_grad():
        expected = de(**tok(TEXTS, padding=True, return_tensors="pt")).pooler_output.numpy()
    code = f"""
import json, torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained({str(folder)!r})
with torch.no_grad():
    pooled = model(**tok({TEXTS!r}, padding=True, return_tensors="pt")).pooler_output
st = SentenceTransformer({str(folder)!r}, trust_remote_code=True)
print(json.dumps({{"auto": pooled.tolist(), "st": st.encode({TEXTS!r}).tolist(), "type": type(model).__name__}}))
"""
    stdout = run_python_without_package(code, cwd=tmp_path).stdout
    result = json.loads(stdout[stdout.rindex('{"auto"'):].splitlines()[0])
    assert result["type"] == "InfusedDualEncoderModel"
    np.testing.assert_allclose(result["auto"], expected, atol=1e-5)
    # cosine similarity (the paper's MultipleNegativesRankingLoss): sentence-transformers ships unit vectors
    np.testing.assert_allclose(result["st"], expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)


def test_errors(cross_encoder_folder, tmp_path, tok):
    plain = tmp_path / "plain"
    BertModel(tiny_config(tok)).save_pretrained(plain)
    tok.save_pretrained(plain)
    with pytest.raises(ValueError, match="is not a cross-encoder.*no sequence-classification head"):
        infuse(str(plain))
    with pytest.raises(ValueError, match="has no sequence-classification head"):
        layerwise_embeddings(BertModel(tiny_config(tok)), TEXTS, tokenizer=tok)
    with pytest.raises(ValueError, match=r"layer 4 is out of range: this model has layers 0 \(embeddings\) .. 3"):
        layerwise_embeddings(str(cross_encoder_folder), TEXTS, layers=[1, 4])
    with pytest.raises(ValueError, match="num_copied_layers \\+ num_new_layers = 0"):
        infuse(str(cross_encoder_folder), num_copied_layers=0, num_new_layers=0)
    with pytest.raises(ValueError, match="num_copied_layers=5 but the cross-encoder has 3 layers"):
        infuse(str(cross_encoder_folder), num_copied_layers=5)
    with pytest.raises(ValueError, match="num_copied_layers \\+ num_new_layers = 0"):
        InfusedDualEncoderConfig(num_copied_layers=0, num_new_layers=0)
    with pytest.raises(ValueError, match="copies='second'"):
        layerwise_embeddings(str(cross_encoder_folder), TEXTS, copies="second")


def write_beir(folder, corpus, queries, qrels):
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                                                 for i, t in corpus.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()))
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels.items()))
    return folder


def hits_and_mrr_by_hand(queries, documents, qrels, query_ids, doc_ids):
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    d = documents / np.linalg.norm(documents, axis=1, keepdims=True)
    hits, mrr = [], []
    for i, query_id in enumerate(query_ids):
        ranking = [doc_ids[j] for j in np.argsort(-(q[i] @ d.T), kind="stable")]
        rank = ranking.index(qrels[query_id]) + 1
        hits.append(1.0 if rank <= 10 else 0.0)
        mrr.append(1.0 / rank if rank <= 10 else 0.0)
    return float(np.mean(hits)), float(np.mean(mrr))


@pytest.mark.slow
def test_layerwise_analysis_and_cli(cross_encoder_folder, tok, tmp_path):
    from dense_encoders.cli import main
    from dense_encoders.evaluation.layerwise import layerwise_analysis

    torch.manual_seed(1)
    de_folder = tmp_path / "de"
    BertModel(tiny_config(tok), add_pooling_layer=False).save_pretrained(de_folder)
    tok.save_pretrained(de_folder)
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho".split()
    datasets = []
    for n in range(2):
        corpus = {f"d{i}": " ".join(rng.choice(words, size=8)) for i in range(14)}
        queries = {f"q{i}": " ".join(rng.choice(words, size=3)) for i in range(5)}
        qrels = {f"q{i}": f"d{int(rng.integers(0, 14))}" for i in range(5)}
        datasets.append((write_beir(tmp_path / f"set{n}", corpus, queries, qrels), corpus, queries, qrels))

    results = layerwise_analysis(str(cross_encoder_folder), str(de_folder), [d[0] for d in datasets],
                                 layers=[0, 2], output_dir=tmp_path / "out", show_progress_bar=False)
    value = {(r["dataset"], r["encoder"], r["layer"]): r for r in results["rows"]}
    assert len(results["rows"]) == 2 * 2 * 2
    for folder, corpus, queries, qrels in datasets:
        q_ids, d_ids = list(queries), list(corpus)
        ce_q = layerwise_embeddings(str(cross_encoder_folder), list(queries.values()), [0, 2])
        ce_d = layerwise_embeddings(str(cross_encoder_folder), list(corpus.values()), [0, 2])
        de_q = dual_encoder_layerwise_embeddings(str(de_folder), list(queries.values()), [0, 2])
        de_d = dual_encoder_layerwise_embeddings(str(de_folder), list(corpus.values()), [0, 2])
        for layer in (0, 2):
            for encoder, (eq, ed) in {"cross-encoder": (ce_q, ce_d), "dual encoder": (de_q, de_d)}.items():
                hits, mrr = hits_and_mrr_by_hand(eq[layer], ed[layer], qrels, q_ids, d_ids)
                row = value[(folder.name, encoder, layer)]
                assert (row["hits@10"], row["mrr@10"]) == (pytest.approx(hits), pytest.approx(mrr)), (encoder, layer)
    from scipy import stats

    for test in results["t_tests"]:
        ce = [value[(f"set{n}", "cross-encoder", test["layer"])][test["measure"]] for n in range(2)]
        de = [value[(f"set{n}", "dual encoder", test["layer"])][test["measure"]] for n in range(2)]
        if ce == de:
            assert (test["t"], test["p"]) == (0.0, 1.0)
        else:
            assert test["p"] == pytest.approx(stats.ttest_rel(ce, de).pvalue, nan_ok=True)
    assert (tmp_path / "out" / "layerwise.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((tmp_path / "out" / "layerwise.csv").read_text().splitlines()) == 1 + 8

    code = main(["layerwise", "--cross-encoder", str(cross_encoder_folder), "--dual-encoder", str(de_folder),
                 "--data", str(datasets[0][0]), "--layers", "1", "--output-dir", str(tmp_path / "cli"),
                 "--no-progress"])
    assert code == 0
    saved = json.loads((tmp_path / "cli" / "layerwise.json").read_text())
    assert {r["layer"] for r in saved["rows"]} == {1} and saved["t_tests"][0]["p"] is None  # one dataset: no t-test
    assert main(["layerwise", "--cross-encoder", str(de_folder), "--dual-encoder", str(de_folder),
                 "--data", str(datasets[0][0]), "--output-dir", str(tmp_path / "x"), "--no-progress"]) == 2


def test_layerwise_cuts_texts_at_the_models_positions_as_evaluate_does(cross_encoder_folder, tok, tmp_path, caplog):
    """128-position models, the tokenizer's 512 by default, a document of about 300 tokens (before: RuntimeError
    "The size of tensor a (355) must match ... (128)"): cut at 128 with a line saying so, the same rows as an
    explicit --max-length 128."""
    from dense_encoders.cli import main

    torch.manual_seed(1)
    de_folder = tmp_path / "de"
    BertModel(tiny_config(tok), add_pooling_layer=False).save_pretrained(de_folder)
    tok.save_pretrained(de_folder)
    corpus = {"d0": "alpha beta " * 150, "d1": "gamma delta", "d2": "epsilon"}
    data = write_beir(tmp_path / "long", corpus, {"q0": "alpha", "q1": "delta"}, {"q0": "d0", "q1": "d1"})
    argv = ["layerwise", "--cross-encoder", str(cross_encoder_folder), "--dual-encoder", str(de_folder), "--data",
            str(data), "--layers", "1", "--no-progress"]
    with caplog.at_level("WARNING", logger="dense_encoders.checkpoints.folder"):
        assert main([*argv, "--output-dir", str(tmp_path / "default")]) == 0
    assert ("the tokenizer's model_max_length 512 exceeds the cross-encoder's 128 positions (max_position_embeddings): "
            "using 128") in caplog.text
    assert "the tokenizer's model_max_length 512 exceeds the dual encoder's 128 positions" in caplog.text
    assert main([*argv, "--max-length", "128", "--output-dir", str(tmp_path / "explicit")]) == 0
    rows = [json.loads((tmp_path / name / "layerwise.json").read_text())["rows"] for name in ("default", "explicit")]
    assert rows[0] == rows[1]


def test_layerwise_refuses_a_non_empty_output_dir(cross_encoder_folder, tok, tmp_path, capsys, monkeypatch):
    """`layerwise` writes into a new or empty folder, its default `layerwise` included: a second run is refused
    before anything is loaded, naming the folder and --overwrite-output-dir, and the earlier files stay; with
    the flag the folder holds this run's files only (never when it holds an input)."""
    from dense_encoders.cli import main

    torch.manual_seed(1)
    de_folder = tmp_path / "de"
    BertModel(tiny_config(tok), add_pooling_layer=False).save_pretrained(de_folder)
    tok.save_pretrained(de_folder)
    data = write_beir(tmp_path / "set", {f"d{i}": f"alpha beta {i}" for i in range(6)},
                      {"q0": "alpha 1", "q1": "beta 4"}, {"q0": "d1", "q1": "d4"})
    argv = ["layerwise", "--cross-encoder", str(cross_encoder_folder), "--dual-encoder", str(de_folder), "--data",
            str(data), "--layers", "1", "--no-progress"]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0  # the default folder, ./layerwise
    default = tmp_path / "layerwise"
    first = (default / "layerwise.json").read_text()
    capsys.readouterr()
    assert main([*argv[:2], str(tmp_path / "missing-ce"), *argv[3:]]) == 2  # refused before the model is loaded
    err = capsys.readouterr().err
    assert "layerwise is not empty: it holds another run's files (layerwise.csv, layerwise.json, " \
           "layerwise.png)" in err and "Pass --overwrite-output-dir to delete its contents first" in err
    assert "Traceback" not in err and (default / "layerwise.json").read_text() == first
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("keep me\n")
    assert main([*argv, "--output-dir", str(output)]) == 2
    assert (output / "notes.txt").read_text() == "keep me\n" and sorted(p.name for p in output.iterdir()) == [
        "notes.txt"]
    assert main([*argv, "--output-dir", str(output), "--overwrite-output-dir"]) == 0
    assert sorted(p.name for p in output.iterdir()) == ["layerwise.csv", "layerwise.json", "layerwise.png"]
    assert json.loads((output / "layerwise.json").read_text()) == json.loads(first)
    capsys.readouterr()
    assert main([*argv, "--output-dir", str(tmp_path), "--overwrite-output-dir"]) == 2
    # refused by the check every command runs before it writes: the folder holds the inputs
    assert f"--output-dir {tmp_path} holds --cross-encoder {cross_encoder_folder}" in capsys.readouterr().err
    assert de_folder.is_dir() and data.is_dir()
    work = tmp_path / "work"  # a folder that holds no input but the current directory
    work.mkdir()
    (work / "notes.txt").write_text("keep me\n")
    monkeypatch.chdir(work)
    assert main([*argv, "--output-dir", str(work), "--overwrite-output-dir"]) == 2
    assert "--overwrite-output-dir would delete everything in" in capsys.readouterr().err
    assert (work / "notes.txt").read_text() == "keep me\n"


@pytest.fixture
def tiny_beir(tmp_path):
    rng = np.random.default_rng(0)
    words = ("protein cell gene virus drug trial cancer heart brain immune bacteria vaccine dose risk patient "
             "blood sugar insulin liver kidney").split()
    corpus = {f"d{i}": " ".join(rng.choice(words, size=10)) for i in range(40)}
    queries = {f"q{i}": " ".join(rng.choice(words, size=3)) for i in range(16)}
    qrels = {f"q{i}": f"d{int(rng.integers(0, 40))}" for i in range(16)}
    folder = write_beir(tmp_path / "tiny-beir", corpus, queries, qrels)
    (folder / "qrels" / "train.tsv").write_text((folder / "qrels" / "test.tsv").read_text())
    return folder, corpus, queries, qrels


def test_bm25_triplets_use_unjudged_bm25_candidates(tiny_beir):
    from dense_encoders.data.bm25 import bm25_run, mine_bm25_triplets
    from dense_encoders.data.retrieval import load_beir

    folder, corpus, queries, qrels = tiny_beir
    dataset = load_beir(folder, split="train")
    run = bm25_run(dataset, k=10)
    assert all(len(docs) == 10 for docs in run.values())
    # BM25 ranks a document that shares all query words above one that shares none
    for query_id, query in queries.items():
        ranked = sorted(run[query_id], key=lambda d: -run[query_id][d])
        overlap = [len(set(query.split()) & set(corpus[d].split())) for d in ranked]
        assert overlap[0] >= max(overlap[1:]) - 1
    triplets = mine_bm25_triplets(dataset, negatives_from_top=10, run=run)
    assert len(triplets) == len(qrels)
    text_to_id = {text: doc_id for doc_id, text in corpus.items()}
    for triplet in triplets:
        query_id = next(q for q, text in queries.items() if text == triplet["anchor"])
        negative = text_to_id[triplet["negative"]]
        assert text_to_id[triplet["positive"]] == qrels[query_id]
        assert negative != qrels[query_id] and negative in run[query_id]


@pytest.mark.slow
def test_cli_infuse_trains_and_reports(cross_encoder_folder, tiny_beir, tmp_path, tok):
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    from dense_encoders.cli import main
    from dense_encoders.evaluation import evaluate_retrieval

    folder, *_ = tiny_beir
    baseline = tmp_path / "baseline"
    torch.manual_seed(3)
    BertModel(tiny_config(tok), add_pooling_layer=False).save_pretrained(baseline)
    tok.save_pretrained(baseline)
    from dense_encoders.checkpoints.folder import write_sentence_transformers_files

    write_sentence_transformers_files(baseline, pooling="mean", similarity="cosine")
    output = tmp_path / "de-2"
    code = main(["infuse", "--cross-encoder", str(cross_encoder_folder), "--train-data", str(folder),
                 "--output-dir", str(output), "--also-random", "--epochs", "1", "--batch-size", "8",
                 "--max-length", "32", "--candidates", "10", "--eval-data", str(folder), "--baseline", str(baseline),
                 "--rerank-top-k", "5"])
    assert code == 0
    report = json.loads((output / "report.json").read_text())
    assert [r["model"] for r in report["rows"]] == ["baseline DE", "DE-2-Rand", "DE-2-CE"]
    assert report["rows"][0]["speedup"] == pytest.approx(1.0)
    # the report's numbers are the evaluation harness's numbers for each folder
    for row in report["rows"]:
        again = evaluate_retrieval(row["path"], folder, k=100, cross_encoder=str(cross_encoder_folder), rerank_top_k=5,
                                   no_progress=True)
        assert row["retrieve"]["mrr@10"] == pytest.approx(again.metrics["mrr@10"])
        assert row["rerank"]["hits@10"] == pytest.approx(again.rerank["metrics"]["hits@10"])
    # DE-2-CE started from the CE's layer 0 and was trained; it loads as a SentenceTransformer
    initial, trained = load_file(output / "initial" / "model.safetensors"), load_file(output / "model.safetensors")
    ce = load_file(cross_encoder_folder / "model.safetensors")
    assert torch.equal(initial["encoder.layer.0.output.dense.weight"], ce["bert.encoder.layer.0.output.dense.weight"])
    assert not torch.equal(trained["encoder.layer.0.output.dense.weight"],
                           initial["encoder.layer.0.output.dense.weight"])
    model = SentenceTransformer(str(output), trust_remote_code=True)
    assert model.encode(["heart"]).shape == (1, 32)


def test_infuse_with_the_papers_recipe_records_it_in_the_card(tmp_path, tok, cross_encoder_folder, tiny_beir, capsys):
    """--recipe ce-infusion sets the MNRL script's values; flags override them; the card says which."""
    from dense_encoders.cli import main

    folder, *_ = tiny_beir
    output = tmp_path / "de-2-recipe"
    code = main(["infuse", "--recipe", "ce-infusion", "--cross-encoder", str(cross_encoder_folder), "--train-data",
                 str(folder), "--output-dir", str(output), "--epochs", "1", "--batch-size", "8", "--max-length", "32",
                 "--candidates", "10", "--warmup-steps", "0"])
    assert code == 0
    assert ("trained with the recipe ce-infusion (Can Cross Encoders Produce Useful Sentence Embeddings?); "
            "overridden: batch_size=8, epochs=1.0, max_length=32, warmup_steps=0.0") in capsys.readouterr().err
    setup = json.loads((output / "infusion_setup.json").read_text())
    assert (setup["recipe"], setup["learning_rate"], setup["model"]) == ("ce-infusion", 2e-5, "DE-2-CE")
    args = json.loads((output / "training_args.json").read_text())
    assert (args["learning_rate"], args["warmup_steps"], args["per_device_train_batch_size"]) == (2e-5, 0, 8)
    card = (output / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("- recipe: "))
    assert "`ce-infusion`" in line and "epochs 1.0 (recipe: 10)" in line and "max_length 32 (recipe: 300)" in line
    assert "learning_rate" not in line
