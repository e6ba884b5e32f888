"""Lightning IR bi-encoders with a TITE backbone, converted by ``dense-encoders convert``.

No folder that Lightning IR itself saved is available here, so the fixture is BUILT in the test from the
format as Lightning IR's source (github.com/webis-de/lightning-ir) defines it:

* ``config.json``: ``model_type: "lir-dpr"``, ``backbone_model_type: "tite"``, the backbone's (the TITE
  authors') keys at the top level, and the bi-encoder keys ``query_length``, ``doc_length``,
  ``similarity_function``, ``normalize``, ``query_pooling_strategy`` / ``doc_pooling_strategy`` (newer
  releases: ``normalization_strategy``, ``pooling_strategy``), ``add_marker_tokens``, ``embedding_dim``,
  ``projection``;
* weights: the TITE tensors under the authors' names with no prefix (the model subclasses the backbone),
  plus ``projection.weight`` / ``projection.bias``;
* tokenizer: the backbone's (TITE's template adds no [CLS]/[SEP] to a single text) with the special tokens
  ``[QUE]`` / ``[DOC]`` added, and the word table resized to a multiple of 8; ``tokenizer_config.json``
  names Lightning IR's ``BiEncoderTokenizer``;
* encoding: ``[QUE] text`` truncated to ``query_length`` tokens (the marker counted), ``[DOC] text`` to
  ``doc_length``; backbone -> first pooling -> projection -> L2 normalisation when asked.

The backbone is the TITE authors' tiny model (tests/fixtures/tite_authors/late), so the backbone's
vectors are the ones their code computed; the expected bi-encoder vectors are those vectors through the
projection, computed by hand.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import FLOAT64_TOLERANCE, TITE_AUTHORS, cpu_only_env, write_tite_tokenizer

from dense_encoders import TiteModel
from dense_encoders.checkpoints import ConversionError, convert_checkpoint
from dense_encoders.checkpoints.folder import publishing_problems

AUTHORS = TITE_AUTHORS
QUERY_LENGTH, DOC_LENGTH = 6, 12


def build_tokenizer(folder: Path, markers: bool) -> dict[str, int]:
    """The backbone tokenizer (100 ids, TITE's '$A' template) with Lightning IR's marker tokens added."""
    tokenizer = write_tite_tokenizer(folder, ["[QUE]", "[DOC]"] if markers else [], {
        "tokenizer_class": "BiEncoderTokenizer", "backbone_tokenizer_class": "TiteTokenizer",
        "query_length": QUERY_LENGTH, "doc_length": DOC_LENGTH, "add_marker_tokens": markers})
    return {"[QUE]": tokenizer.token_to_id("[QUE]"), "[DOC]": tokenizer.token_to_id("[DOC]")}


def build_lightning_ir_folder(folder: Path, *, markers=True, projection="linear", normalize=False,
                              similarity="dot", newer_keys=False, seed=0) -> dict:
    """A Lightning IR DPR folder with the TITE authors' backbone; returns its projection tensors."""
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True)
    backbone = load_file(AUTHORS / "encoder" / "model.safetensors")
    config = json.loads((AUTHORS / "encoder" / "config.json").read_text())
    generator = torch.Generator().manual_seed(seed)
    marker_ids = build_tokenizer(folder, markers)
    if markers:  # two tokens added to 100: resized to the next multiple of 8
        table = backbone["embeddings.word_embeddings.weight"]
        backbone["embeddings.word_embeddings.weight"] = torch.cat([table, torch.randn(4, 64, generator=generator)])
        config["vocab_size"] = 104
    width = 48 if projection else 64
    extra = {}
    if projection:
        extra["projection.weight"] = torch.randn(width, 64, generator=generator) / 8
        if projection == "linear":
            extra["projection.bias"] = torch.randn(width, generator=generator)
    save_file({**backbone, **extra}, folder / "model.safetensors")
    config.update(model_type="lir-dpr", backbone_model_type="tite", architectures=["LirDprTiteModel"],
                  query_length=QUERY_LENGTH, doc_length=DOC_LENGTH, similarity_function=similarity,
                  add_marker_tokens=markers, embedding_dim=width, projection=projection)
    if newer_keys:
        config.update(pooling_strategy="first", normalization_strategy="l2" if normalize else None,
                      sparsification_strategy=None)
    else:
        config.update(query_pooling_strategy="first", doc_pooling_strategy="first", normalize=normalize,
                      sparsification=None)
    (folder / "config.json").write_text(json.dumps(config))
    return {"tensors": extra, "markers": marker_ids}


def lightning_ir_ids(folder: Path, texts: list[str], marker: str | None, length: int) -> list[list[int]]:
    """Token ids as Lightning IR builds them: [marker] + the backbone tokenizer's ids, truncated to ``length``
    with the marker counted (read straight from tokenizer.json with the tokenizers library)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    prefix = [tokenizer.token_to_id(marker)] if marker else []
    return [(prefix + tokenizer.encode(text).ids)[:length] for text in texts]


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    return ids, (torch.arange(width)[None] < torch.tensor([len(r) for r in rows])[:, None]).long()


VARIANTS = {
    "markers-linear-dot": dict(),
    "no-markers-no-bias": dict(markers=False, projection="linear_no_bias"),
    "normalized-newer-keys": dict(normalize=True, newer_keys=True),
    "no-projection-cosine": dict(projection=None, similarity="cosine"),
}


@pytest.mark.numerics
@pytest.mark.parametrize("variant", VARIANTS)
def test_converted_bi_encoder_gives_lightning_irs_vectors(tmp_path, variant):
    """AutoModel: the authors' backbone vectors through the projection (by hand), float64 within 1e-10; every
    batch's difference is printed (``pytest -s``)."""
    from safetensors.torch import load_file
    from transformers import AutoModel

    source = tmp_path / "lir"
    built = build_lightning_ir_folder(source, **VARIANTS[variant])
    model = AutoModel.from_pretrained(convert_checkpoint(source, tmp_path / "out"), trust_remote_code=True,
                                      dtype=torch.float64).eval()
    expected = load_file(AUTHORS / "expected.safetensors")
    weight = built["tensors"].get("projection.weight")
    bias = built["tensors"].get("projection.bias")
    for name in ("A_right_padded_32", "A_left_padded_32", "B_right_padded_24", "C_right_padded_16", "D_all_length_1"):
        backbone = expected[f"{name}.float64"]
        by_hand = backbone if weight is None else backbone @ weight.double().T + (0 if bias is None else bias.double())
        with torch.no_grad():
            vectors = model(expected[f"{name}.input_ids"],
                            attention_mask=expected[f"{name}.attention_mask"]).pooler_output
        print(f"{variant} {name}: max abs difference {(vectors - by_hand).abs().max().item():.1e}")  # pytest -s
        torch.testing.assert_close(vectors, by_hand, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
@pytest.mark.parametrize("variant", VARIANTS)
def test_sentence_transformers_encodes_queries_and_documents_as_lightning_ir(tmp_path, variant):
    """encode_query / encode_document: markers, the two lengths, pooling, normalisation and similarity as
    Lightning IR applies them, compared with the converted model on ids built from Lightning IR's rules."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    options = VARIANTS[variant]
    source = tmp_path / "lir"
    build_lightning_ir_folder(source, **options)
    out = convert_checkpoint(source, tmp_path / "out")
    queries = ["what is dense retrieval", "how does a neural network train on long text data", "river"]
    documents = ["the first passage of the index is about a big red bridge over a long river in the mountain",
                 "protein", "music is fast and slow"]
    encoder = SentenceTransformer(str(out), device="cpu", trust_remote_code=True).double()
    model = AutoModel.from_pretrained(out, trust_remote_code=True, dtype=torch.float64).eval()
    markers = options.get("markers", True)
    normalize = options.get("normalize", False)
    for side, texts, marker, length in (("query", queries, "[QUE]", QUERY_LENGTH),
                                        ("document", documents, "[DOC]", DOC_LENGTH)):
        ids, mask = padded(lightning_ir_ids(source, texts, marker if markers else None, length))
        assert ids.shape[1] == length  # the longest text was truncated, marker included
        with torch.no_grad():
            reference = model(ids, attention_mask=mask).pooler_output
        if normalize:
            reference = torch.nn.functional.normalize(reference, dim=-1)
        encode = encoder.encode_query if side == "query" else encoder.encode_document
        torch.testing.assert_close(torch.as_tensor(encode(texts)), reference, **FLOAT64_TOLERANCE)
    expected_similarity = "cosine" if normalize or options.get("similarity") == "cosine" else "dot"
    assert encoder.similarity_fn_name == expected_similarity


def test_conversion_record_tokenizer_and_resave(tmp_path):
    from transformers import AutoTokenizer

    source = tmp_path / "lir"
    built = build_lightning_ir_folder(source)
    out = convert_checkpoint(source, tmp_path / "out")
    record = json.loads((out / "conversion.json").read_text())
    assert record["source_format"] == "lightning-ir" and record["markers"] == {"query": "[QUE] ", "document": "[DOC] "}
    assert record["lengths"] == {"query_length": QUERY_LENGTH, "document_length": DOC_LENGTH}
    tokenizer = AutoTokenizer.from_pretrained(out)  # no Lightning IR needed
    assert tokenizer("[QUE] river")["input_ids"] == [built["markers"]["[QUE]"],
                                                     tokenizer.convert_tokens_to_ids("river")]
    card = (out / "README.md").read_text()
    assert "Converted from" in card and "Lightning IR" in card
    assert publishing_problems(out) == []  # pushes like any folder of ours
    # an ordinary checkpoint: saved again into its folder, the sentence-transformers settings stay
    before = {name: (out / name).read_text() for name in ("sentence_bert_config.json", "modules.json")}
    TiteModel.from_pretrained(out).save_pretrained(out)
    assert {name: (out / name).read_text() for name in before} == before
    assert json.loads((out / "config_sentence_transformers.json").read_text())["prompts"]["query"] == "[QUE] "


def test_loading_the_lightning_ir_folder_directly_is_refused(tmp_path):
    source = tmp_path / "lir"
    build_lightning_ir_folder(source)
    with pytest.raises(ValueError, match=r"model_type 'lir-dpr' \(a Lightning IR model\).*dense-encoders convert"):
        TiteModel.from_pretrained(source)
    from transformers import AutoModel

    with pytest.raises(ValueError, match=rf"^{source} is a Lightning IR bi-encoder \(model_type 'lir-dpr'\).*"
                                         rf"`dense-encoders convert {source} OUT`"):  # ours, in one line
        AutoModel.from_pretrained(source)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "a text"}) + "\n")
    result = subprocess.run([sys.executable, "-m", "dense_encoders.cli", "encode", str(source), str(corpus),
                             "--output", str(tmp_path / "shards")],
                            capture_output=True, text=True, env=cpu_only_env(), timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "Lightning IR" in result.stderr and f"dense-encoders convert {source} OUT" in result.stderr


@pytest.mark.parametrize("change, message", [
    (dict(sparsification="relu"), r"sparsification='relu' is not supported"),
    (dict(similarity_function="l2"), r"similarity_function='l2' is not supported"),
    (dict(backbone_model_type="bert"), r"backbone_model_type='bert': only TITE"),
    (dict(query_pooling_strategy="sum"), r"query pooling strategy 'sum' is not supported"),
    (dict(model_type="lir-colbert"), r"model_type='lir-colbert' is not a single-vector"),
    (dict(projection="linear_no_bias"), r"projection='linear_no_bias' but the weights hold \['projection.bias'"),
])
def test_unsupported_lightning_ir_options_are_refused_by_name(tmp_path, change, message):
    source = tmp_path / "lir"
    build_lightning_ir_folder(source)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ConversionError, match=message) as refused:
        convert_checkpoint(source, tmp_path / "out")
    assert "\n" not in str(refused.value) and not (tmp_path / "out").exists()


def test_a_tokenizer_that_adds_cls_and_sep_cannot_carry_the_markers(tmp_path):
    """The markers become prompts only when the tokenizer adds nothing else to a single text."""
    from tokenizers import Tokenizer, processors

    source = tmp_path / "lir"
    build_lightning_ir_folder(source)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))])
    tokenizer.save(str(source / "tokenizer.json"))
    with pytest.raises(ConversionError, match="adds special tokens to a single text"):
        convert_checkpoint(source, tmp_path / "out")
    shutil.rmtree(source)
