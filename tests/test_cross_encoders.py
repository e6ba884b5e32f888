"""Cross-encoder embeddings (seed 002): layer-wise embeddings, infused dual encoders, their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification, BertModel

from dense_encoders import InfusedDualEncoderConfig, InfusedDualEncoderModel
from dense_encoders.cross_encoders import (
    dual_encoder_layerwise_embeddings,
    infuse,
    layerwise_embeddings,
    save_dual_encoder,
)

TEXTS = ["dense retrieval with cross encoders", "a", "which layer of the cross encoder embeds best?"]


def tiny_config(tok, **overrides):
    settings = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, num_labels=1)
    settings.update(overrides)
    return BertConfig(**settings)


@pytest.fixture
def cross_encoder_folder(tmp_path, tok):
    torch.manual_seed(0)
    folder = tmp_path / "ce"
    BertForSequenceClassification(tiny_config(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


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


def test_infused_dual_encoder_copies_the_cross_encoder_exactly(cross_encoder_folder):
    ce = AutoModelForSequenceClassification.from_pretrained(cross_encoder_folder)
    de, _ = infuse(str(cross_encoder_folder))  # DE-2-CE: 1 copied + 1 new
    assert isinstance(de, InfusedDualEncoderModel) and de.config.num_hidden_layers == 2
    assert de.config.infused_from == str(cross_encoder_folder)
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


def test_infused_embeddings_are_padding_invariant_mean_pools(cross_encoder_folder, tok):
    de, _ = infuse(str(cross_encoder_folder))
    de.eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        together = de(**batch)
        for i, text in enumerate(TEXTS):
            alone = de(**tok(text, return_tensors="pt"))
            torch.testing.assert_close(together.pooler_output[i], alone.pooler_output[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(alone.pooler_output[0], alone.last_hidden_state[0].mean(0), atol=1e-6,
                                       rtol=1e-6)


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
    np.testing.assert_allclose(result["st"], expected, atol=1e-5)


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
