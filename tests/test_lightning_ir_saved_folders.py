"""Folders that Lightning IR itself saved (0.0.5 and 0.0.6, tests/fixtures/lightning_ir/, see its README.md),
converted and compared with the vectors and scores Lightning IR computed for the same texts.

The references are Lightning IR's own outputs (``lightning_ir_outputs.safetensors``: float64 and float32), so every
comparison here is against an independent implementation: AutoModel's ``pooler_output`` (item 14 of issue 35),
the model card's usage code (15), loading an unconverted folder (17), the key the saving release reads (18), an
empty document (19) and Lightning IR's trainer output (20).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dense_encoders import cli
from dense_encoders.checkpoints import ConversionError, convert_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "lightning_ir"
CONVERTIBLE = sorted(p.name for p in FIXTURES.iterdir() if (p / "lightning_ir_outputs.safetensors").is_file())
MEAN = ("lir005-plain-mean", "lir006-plain-default-normalized")  # Lightning IR averages the token states


def reference(name: str) -> tuple[dict, dict]:
    """(Lightning IR's outputs, the texts they were computed for)."""
    folder = FIXTURES / name
    return (load_file(folder / "lightning_ir_outputs.safetensors"),
            json.loads((folder / "lightning_ir_texts.json").read_text()))


def float32_tolerance(expected: torch.Tensor) -> dict:
    """float32 bounds from the magnitudes: a few hundred ulps of the largest value (tiny models, 5 layers)."""
    scale = float(expected.abs().max())
    return dict(rtol=1e-5, atol=1e-5 * max(scale, 1.0))


class Converted(dict):
    """Each fixture folder converted once, on first use."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        self[name] = convert_checkpoint(FIXTURES / name, self.root / name)
        return self[name]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return Converted(tmp_path_factory.mktemp("converted"))


def tokenized(out: Path, texts: list[str], side: str):
    """The batch Lightning IR builds: the side's marker in front, cut at the side's length (marker counted)."""
    from transformers import AutoTokenizer

    record = json.loads((out / "conversion.json").read_text())
    prompt = (record["markers"] or {}).get(side, "")
    length = record["lengths"][f"{side}_length"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    return tokenizer([prompt + text for text in texts], padding=True, truncation=True, max_length=length,
                     return_tensors="pt"), record["normalize"]


@pytest.mark.numerics
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_automodel_pooler_output_is_lightning_irs_vector(converted, name):
    """Item 14: pooler_output is the bi-encoder's vector, mean pooling included; scores as Lightning IR's."""
    from transformers import AutoModel

    out = converted[name]
    expected, texts = reference(name)
    for dtype, suffix in ((torch.float64, "float64"), (torch.float32, "float32")):
        model = AutoModel.from_pretrained(out, dtype=dtype).eval()
        vectors = {}
        for side, key in (("query", "queries"), ("document", "documents")):
            batch, normalize = tokenized(out, texts[key], side)
            with torch.no_grad():
                vectors[side] = model(**batch).pooler_output
            if normalize:
                vectors[side] = torch.nn.functional.normalize(vectors[side], dim=-1)
        scores = vectors["query"] @ vectors["document"].T
        for got, key in ((vectors["query"], "query_vectors"), (vectors["document"], "document_vectors"),
                         (scores, "scores")):
            want = expected[f"{key}.{suffix}"]
            tolerance = dict(atol=1e-10, rtol=1e-10) if dtype == torch.float64 else float32_tolerance(want)
            torch.testing.assert_close(got, want, **tolerance)
    if name in MEAN:
        assert json.loads((out / "config.json").read_text())["output_pooling"] == "mean"


@pytest.mark.numerics
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_encode_query_and_encode_document_give_lightning_irs_vectors(converted, name):
    from sentence_transformers import SentenceTransformer

    expected, texts = reference(name)
    model = SentenceTransformer(str(converted[name]), device="cpu").double()
    queries = torch.as_tensor(model.encode_query(texts["queries"]))
    documents = torch.as_tensor(model.encode_document(texts["documents"]))
    torch.testing.assert_close(queries, expected["query_vectors.float64"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(documents, expected["document_vectors.float64"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(model.similarity(queries, documents), expected["scores.float64"], atol=1e-10, rtol=1e-10)


def card_code(out: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (out / "README.md").read_text(), flags=re.S)


def check_card_code(out: Path, name: str, tmp_path: Path, monkeypatch) -> None:
    """Each Python block of the card's usage section, run as written on the folder ``out`` (the card names it by
    its folder name) with the fixture ``name``'s texts, gives Lightning IR's vectors and scores."""
    expected, texts = reference(name)
    shutil.copytree(out, tmp_path / out.name)
    monkeypatch.chdir(tmp_path)
    blocks = card_code(out)
    assert len(blocks) == 2 and all("queries = [" in block and "documents = [" in block for block in blocks)
    for block in blocks:
        code = re.sub(r"^queries = \[.*\]$", f"queries = {texts['queries']!r}", block, flags=re.M)
        code = re.sub(r"^documents = \[.*\]$", f"documents = {texts['documents']!r}", code, flags=re.M)
        namespace: dict = {}
        exec(compile(code, f"{name}/README.md", "exec"), namespace)
        for key in ("query_embeddings", "document_embeddings", "scores"):
            got = torch.as_tensor(namespace[key]).float()
            want = expected[f"{key.replace('embeddings', 'vectors')}.float32"]
            torch.testing.assert_close(got, want, **float32_tolerance(want))


@pytest.mark.numerics
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_the_cards_usage_code_gives_lightning_irs_vectors(converted, name, tmp_path, monkeypatch):
    """Item 15: the card's usage code gives Lightning IR's vectors and scores (:func:`check_card_code`)."""
    check_card_code(converted[name], name, tmp_path, monkeypatch)


UNCONVERTED = ["lir005-plain-mean", "lir006-pooled-first-markers"]


@pytest.mark.parametrize("model_type", ["lir-dpr", "bi-encoder"])
def test_loading_an_unconverted_folder_is_refused_in_one_line(tmp_path, model_type):
    """Item 17: AutoConfig, AutoModel and SentenceTransformer on a folder Lightning IR saved stop with our one line
    naming `dense-encoders convert` (not transformers' "does not recognize this architecture")."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoConfig, AutoModel

    folder = tmp_path / "lir"
    shutil.copytree(FIXTURES / "lir006-pooled-first-markers", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    for load in (AutoConfig.from_pretrained, AutoModel.from_pretrained, SentenceTransformer):
        with pytest.raises(ValueError) as refused:
            load(str(folder))
        message = str(refused.value)
        assert "\n" not in message and f"dense-encoders convert {folder} OUT" in message
        assert f"model_type {model_type!r}" in message and "does not recognize" not in message


def test_the_refusal_leaves_every_other_model_type_loadable(tmp_path):
    """Registering the two Lightning IR model types takes nothing from transformers or from our families."""
    from transformers import AutoConfig, BertConfig

    import dense_encoders
    from dense_encoders.models.unconverted import UNCONVERTED_CONFIGS

    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=37).save_pretrained(tmp_path / "b")
    assert type(AutoConfig.from_pretrained(tmp_path / "b")) is BertConfig
    dense_encoders.TiteConfig(num_hidden_layers=2, hidden_sizes=16, num_attention_heads=2, intermediate_sizes=32,
                              kernel_sizes=None, max_position_embeddings=8).save_pretrained(tmp_path / "t")
    assert type(AutoConfig.from_pretrained(tmp_path / "t")) is dense_encoders.TiteConfig
    assert {config.model_type for config in UNCONVERTED_CONFIGS} == {"lir-dpr", "bi-encoder"}


def test_the_key_the_saving_release_reads_decides_sparsification(converted, tmp_path):
    """Item 18: 0.0.6 stores DprConfig's `sparsification="relu"` but its model reads only
    `sparsification_strategy` (null): the folder converts (its vectors are compared above) and conversion.json
    says which key was not read. 0.0.5's model reads `sparsification`: refused. A 0.0.6 folder whose
    `sparsification_strategy` is set: refused."""
    record = json.loads((converted["lir006-pooled-relu-unread"] / "conversion.json").read_text())
    assert record["keys_not_read"] == {"sparsification": "relu", "query_pooling_strategy": "first",
                                       "doc_pooling_strategy": "first"}
    assert "sparsification_strategy" in record["keys_read"]
    with pytest.raises(ConversionError, match=r"sparsification='relu' is not supported"):
        convert_checkpoint(FIXTURES / "lir005-pooled-relu", tmp_path / "a")
    source = tmp_path / "lir"
    shutil.copytree(FIXTURES / "lir006-pooled-relu-unread", source)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "sparsification_strategy": "relu"}))
    with pytest.raises(ConversionError, match=r"sparsification_strategy='relu' is not supported"):
        convert_checkpoint(source, tmp_path / "b")
    # 0.0.6's default pooling (mean) is what its model applies, whatever query_pooling_strategy says
    assert json.loads((converted["lir006-plain-default-normalized"] / "conversion.json").read_text())[
        "lightning_ir_pooling_strategy"] == "mean"


@pytest.mark.numerics
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_an_empty_document_gets_lightning_irs_vector_or_a_named_refusal(converted, name):
    """Item 19: with first pooling Lightning IR gives an empty document a vector (without markers the backbone's
    zeros through the projection: its bias); one empty text among others then gets that vector and the others
    theirs. Where Lightning IR's vector is NaN (mean over no tokens) the error names the empty text."""
    from sentence_transformers import SentenceTransformer

    expected, texts = reference(name)
    model = SentenceTransformer(str(converted[name]), device="cpu").double()
    empty = expected["empty_document_vector.float64"]
    documents = [texts["documents"][0], "", *texts["documents"][1:]]
    if torch.isfinite(empty).all():
        vectors = torch.as_tensor(model.encode_document(documents))
        torch.testing.assert_close(vectors[1], empty, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(vectors[[0, 2, 3, 4]], expected["document_vectors.float64"], atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(torch.as_tensor(model.encode_document([""]))[0], empty, atol=1e-10, rtol=1e-10)
    else:
        assert torch.isnan(empty).all()
        for batch in (documents, [""]):
            with pytest.raises(ValueError, match=r"empty.*no vector for an empty text") as refused:
                model.encode_document(batch)
            assert "\n" not in str(refused.value)


def test_the_empty_document_under_first_pooling_is_the_projection_bias():
    """The fixture folder without markers: Lightning IR's empty-document vector is exactly the projection's bias."""
    expected, _ = reference("lir006-pooled-relu-unread")
    bias = load_file(FIXTURES / "lir006-pooled-relu-unread" / "model.safetensors")["projection.bias"]
    assert torch.equal(expected["empty_document_vector.float32"], bias)


def test_convert_names_the_folder_lightning_irs_trainer_writes(tmp_path, capsys):
    """Item 20: Lightning IR's trainer saves the model to lightning_logs/version_N/huggingface_checkpoint/
    (LightningIRModule.on_save_checkpoint); convert on version_N/, on its .ckpt or on lightning_logs/ names it."""
    version = tmp_path / "lightning_logs" / "version_0"
    (version / "checkpoints").mkdir(parents=True)
    (version / "checkpoints" / "epoch=0-step=10.ckpt").write_bytes(b"not read")
    shutil.copytree(FIXTURES / "lir006-pooled-first-markers", version / "huggingface_checkpoint")
    wanted = version / "huggingface_checkpoint"
    for source in (version, version / "checkpoints" / "epoch=0-step=10.ckpt", version / "checkpoints",
                   tmp_path / "lightning_logs"):
        assert cli.main(["convert", str(source), str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(wanted) in err and "convert that folder" in err, err
        assert not (tmp_path / "out").exists()
    assert cli.main(["convert", str(wanted), str(tmp_path / "out")]) == 0


def test_a_folder_converted_before_output_pooling_loads_as_it_did(converted, tmp_path):
    """A config without `output_pooling` / `empty_texts` (converted before they existed) keeps the old behaviour:
    pooler_output is the first token's state, an empty text is refused."""
    from transformers import AutoModel

    old = tmp_path / "old"
    shutil.copytree(converted["lir005-plain-mean"], old)
    config = json.loads((old / "config.json").read_text())
    assert config.pop("output_pooling") == "mean" and config.pop("empty_texts") == "error"
    (old / "config.json").write_text(json.dumps(config))
    model = AutoModel.from_pretrained(old, dtype=torch.float64).eval()
    assert (model.config.output_pooling, model.config.empty_texts) == ("first", "error")
    ids, mask = torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]])
    with torch.no_grad():
        output = model(ids, attention_mask=mask)
    assert torch.equal(output.pooler_output, output.last_hidden_state[:, 0])
    with pytest.raises(ValueError, match=r"Text 1 of the batch is empty"):
        model(ids, attention_mask=torch.tensor([[1, 1, 1], [0, 0, 0]]))


def modified_fixture(tmp_path: Path, name: str, **change) -> Path:
    """A copy of the fixture folder ``name`` with ``change`` applied to its config.json."""
    folder = tmp_path / f"{name}-modified"
    shutil.copytree(FIXTURES / name, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    return folder


@pytest.mark.numerics
def test_a_pooled_tite_converts_with_different_pooling_per_side(tmp_path, capsys):
    """Issue 41 item 5: Lightning IR 0.0.5 with query pooling mean and document pooling max on a TITE that pools
    down to one vector converts (mean and max of one vector are that vector), and encodes as Lightning IR's own
    first-pooling outputs of the same weights; over token states the sides must still agree."""
    from sentence_transformers import SentenceTransformer

    name = "lir005-pooled-first-markers-normalized"
    source = modified_fixture(tmp_path, name, query_pooling_strategy="mean", doc_pooling_strategy="max")
    assert cli.main(["convert", str(source), str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "conversion.json").read_text())
    assert record["lightning_ir_pooling_strategy"] == "mean (queries), max (documents)"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["empty_texts"] == "error"
    expected, texts = reference(name)
    model = SentenceTransformer(str(tmp_path / "out"), device="cpu").double()
    torch.testing.assert_close(torch.as_tensor(model.encode_query(texts["queries"])),
                               expected["query_vectors.float64"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(torch.as_tensor(model.encode_document(texts["documents"])),
                               expected["document_vectors.float64"], atol=1e-10, rtol=1e-10)
    capsys.readouterr()
    plain = modified_fixture(tmp_path, "lir005-plain-mean", doc_pooling_strategy="first")
    assert cli.main(["convert", str(plain), str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differs between queries and documents over token states" in err, err
    assert not (tmp_path / "plain").exists()


@pytest.mark.numerics
def test_a_folder_without_a_document_length_is_cut_at_the_models_positions(tmp_path, monkeypatch):
    """Issue 41 item 6: `doc_length: null` is no limit to Lightning IR's tokenizer but its model_max_length, and the
    model takes max_position_embeddings tokens (16 here, below the tokenizer's 32): the converted folder cuts
    documents there, so encode_document and the card's code give Lightning IR's vectors for the fixture's
    documents (one of 24 tokens: Lightning IR cut it at 16) instead of failing on the long one. A folder whose
    sentence-transformers files name no document length gets a card that cuts at the model's positions too."""
    from sentence_transformers import SentenceTransformer

    from dense_encoders.hub import model_card

    name = "lir005-pooled-first-markers-normalized"
    source = modified_fixture(tmp_path, name, doc_length=None)
    out = tmp_path / "converted" / "nodoclen"
    assert cli.main(["convert", str(source), str(out)]) == 0
    check_card_code(out, name, tmp_path / "card", monkeypatch)
    expected, texts = reference(name)
    model = SentenceTransformer(str(out), device="cpu").double()
    torch.testing.assert_close(torch.as_tensor(model.encode_document(texts["documents"])),
                               expected["document_vectors.float64"], atol=1e-10, rtol=1e-10)
    record = json.loads((out / "conversion.json").read_text())
    assert record["lengths"] == {"query_length": 8, "document_length": 16}
    assert "max_position_embeddings=16" in record["lengths_not_set"]["doc_length"]
    # a folder whose sentence-transformers files declare no document length: the card cuts at the positions
    settings = json.loads((out / "sentence_bert_config.json").read_text())
    del settings["document_length"]
    (out / "sentence_bert_config.json").write_text(json.dumps(settings))
    model_card(out, out.name).save(out / "README.md")
    assert 'encode(documents, "[DOC] ", 16)' in (out / "README.md").read_text()
    check_card_code(out, name, tmp_path / "card-without-length", monkeypatch)


def test_empty_texts_under_mean_pooling_are_all_named(converted):
    """Issue 41 item 7: a refusal names every empty row of the batch the model was given (called with the
    caller's own batch, the caller's rows), and, as sentence-transformers sorts texts by length so that its rows
    are not the caller's, the expression it gives finds the empty texts in the caller's list."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    out = converted["lir005-plain-mean"]
    texts = ["what is dense retrieval", "", "river", "protein music", "a b c d e", "bridge over the river", "fast",
             "x", " "]
    tokenizer, model = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out).eval()
    with pytest.raises(ValueError) as refused, torch.no_grad():
        model(**tokenizer(texts, padding=True, return_tensors="pt"))
    message = str(refused.value)
    assert "\n" not in message and message.startswith("Texts 1 and 8 of the batch are empty"), message
    with pytest.raises(ValueError) as refused:
        SentenceTransformer(str(out), device="cpu").encode_query(texts)
    message = str(refused.value)
    assert "\n" not in message and "no vector for an empty text" in message
    expression = re.search(r"\[i for i, text in enumerate\(texts\) if [^]]*\]", message).group(0)
    assert eval(expression, {"texts": texts}) == [1, 8]
