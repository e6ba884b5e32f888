"""Condenser models against independent references: BertModel, a hand-wired head, naive losses."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT64_TOLERANCE, float32_atol, random_mlm_batch, tiny_condenser_config
from safetensors import safe_open
from transformers import AutoModel, AutoModelForPreTraining, BertConfig, BertForMaskedLM, BertModel, RobertaConfig
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from dense_encoders import CoCondenserForPreTraining, CondenserConfig, CondenserForPreTraining, CondenserModel
from dense_encoders.checkpoints.backbones import from_backbone
from dense_encoders.models.condenser import modeling_condenser, span_contrastive_loss

# ---------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("skip_from", [0, 4, 7, -1])
def test_skip_from_outside_range_is_rejected(skip_from):
    with pytest.raises(ValueError, match=r"skip_from=.*outside \[1, num_hidden_layers=4\).*Choose 1 <= skip_from <= 3"):
        tiny_condenser_config(skip_from=skip_from)


@pytest.mark.parametrize("n_head_layers", [0, -2])
def test_head_needs_a_layer(n_head_layers):
    with pytest.raises(ValueError, match="n_head_layers.*at least one layer"):
        tiny_condenser_config(n_head_layers=n_head_layers)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="not divisible by num_attention_heads"):
        tiny_condenser_config(num_attention_heads=5)


def test_config_round_trip_keeps_condenser_fields(tmp_path):
    config = tiny_condenser_config(skip_from=3, n_head_layers=1, late_mlm=False)
    config.save_pretrained(tmp_path)
    loaded = CondenserConfig.from_pretrained(tmp_path)
    assert (loaded.skip_from, loaded.n_head_layers, loaded.late_mlm) == (3, 1, False)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"]["AutoModel"] == "modeling_condenser.CondenserModel"


# ---------------------------------------------------------------------------- encoder = BERT


@pytest.mark.numerics
def test_condenser_model_equals_bert_on_real_minilm_weights(minilm_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    condenser = from_backbone(CondenserForPreTraining, minilm_path).bert.eval()
    bert = BertModel.from_pretrained(minilm_path).eval()
    texts = ["dense retrieval", "a considerably longer sentence about passage retrieval with many more tokens"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = condenser(**batch, output_hidden_states=True)
        reference = bert(**batch, output_hidden_states=True)
    assert len(ours.hidden_states) == len(reference.hidden_states) == 7
    # float32 is the point here (the real weights as shipped): the bound follows from the magnitudes,
    # k * eps32 * max|state| * sqrt(layers so far) (conftest.float32_atol)
    for depth, (mine, theirs) in enumerate(zip(ours.hidden_states, reference.hidden_states), start=1):
        torch.testing.assert_close(mine, theirs, atol=float32_atol(theirs, depth=depth), rtol=0)
    torch.testing.assert_close(ours.last_hidden_state, reference.last_hidden_state,
                               atol=float32_atol(reference.last_hidden_state, depth=7), rtol=0)
    torch.testing.assert_close(ours.pooler_output, ours.last_hidden_state[:, 0], atol=0, rtol=0)


def test_from_backbone_copies_weights_exactly_and_heads_are_fresh(minilm_path):
    model = from_backbone(CondenserForPreTraining, minilm_path, n_head_layers=2)
    with safe_open(str(minilm_path / "model.safetensors"), "pt") as checkpoint:
        for name, tensor in model.bert.state_dict().items():
            assert torch.equal(tensor, checkpoint.get_tensor(name)), name
    assert model.config.skip_from == 3  # half of 6 layers
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    # the head is BERT-initialised: zero biases, unit LayerNorm, small weights
    layer = model.c_head[0]
    assert torch.equal(layer.output.LayerNorm.weight, torch.ones_like(layer.output.LayerNorm.weight))
    assert float(layer.attention.self.query.bias.detach().abs().max()) == 0.0
    assert 0.01 < float(layer.attention.self.query.weight.detach().std()) < 0.03


def test_from_backbone_with_mlm_head_copies_the_head(tmp_path):
    bert_config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64
    )
    source = BertForMaskedLM(bert_config)
    with torch.no_grad():
        source.cls.predictions.transform.dense.weight.normal_()
        source.cls.predictions.bias.uniform_()
    source.save_pretrained(tmp_path / "bert-mlm")
    model = from_backbone(CondenserForPreTraining, tmp_path / "bert-mlm", skip_from=1, n_head_layers=3)
    assert len(model.c_head) == 3 and model.config.skip_from == 1
    for name, tensor in source.cls.state_dict().items():
        assert torch.equal(model.cls.state_dict()[name], tensor), name
    for name, tensor in source.bert.state_dict().items():
        assert torch.equal(model.bert.state_dict()[name], tensor), name


def test_from_backbone_rejects_non_bert_architectures(tmp_path):
    RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"'roberta' checkpoint.*BERT-architecture"):
        from_backbone(CondenserForPreTraining, tmp_path)


def test_empty_input_is_rejected():
    model = CondenserModel(tiny_condenser_config())
    with pytest.raises(ValueError, match="Empty input"):
        model(input_ids=torch.zeros((2, 0), dtype=torch.long))


# ---------------------------------------------------------------------------- pre-training head


def reference_condenser_losses(model: CondenserForPreTraining, batch):
    """Hand-wired Condenser (paper Eq. 6-8): BertModel states, explicit 4-D mask, MLM on ALL positions."""
    bert = BertModel(BertConfig(**{k: v for k, v in model.config.to_dict().items() if k in BertConfig().to_dict()}),
                     add_pooling_layer=False).to(model.dtype)
    bert.load_state_dict(model.bert.state_dict())
    bert.eval()
    states = bert(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
    ).hidden_states
    head = torch.cat([states[-1][:, :1], states[model.config.skip_from][:, 1:]], dim=1)
    additive = (1.0 - batch["attention_mask"][:, None, None, :].to(model.dtype)) * torch.finfo(model.dtype).min
    for layer in model.c_head:
        head = layer(head, additive)
    vocab = model.config.vocab_size
    head_loss = F.cross_entropy(model.cls(head).view(-1, vocab), batch["labels"].view(-1), ignore_index=-100)
    late_loss = F.cross_entropy(model.cls(states[-1]).view(-1, vocab), batch["labels"].view(-1), ignore_index=-100)
    return head_loss, late_loss


@pytest.mark.numerics
@pytest.mark.parametrize("skip_from", [1, 3])
def test_condenser_losses_match_hand_wired_reference(skip_from):
    torch.manual_seed(0)
    config = tiny_condenser_config(skip_from=skip_from)
    config._attn_implementation = "eager"
    model = CondenserForPreTraining(config).double().eval()  # float64: see conftest
    batch = random_mlm_batch()
    with torch.no_grad():
        output = model(**batch)
        head_loss, late_loss = reference_condenser_losses(model, batch)
    assert output.loss.dtype == head_loss.dtype == torch.float64
    torch.testing.assert_close(output.head_mlm_loss, head_loss, **FLOAT64_TOLERANCE)
    torch.testing.assert_close(output.late_mlm_loss, late_loss, **FLOAT64_TOLERANCE)
    torch.testing.assert_close(output.loss, head_loss + late_loss, **FLOAT64_TOLERANCE)


def test_late_mlm_off_drops_the_late_loss():
    model = CondenserForPreTraining(tiny_condenser_config(late_mlm=False)).eval()
    output = model(**random_mlm_batch())
    assert output.late_mlm_loss is None
    torch.testing.assert_close(output.loss, output.head_mlm_loss)


def test_head_sees_only_late_cls_and_early_tokens():
    """Changing the late layers' token states (not CLS) must not change the head loss."""
    torch.manual_seed(0)
    model = CondenserForPreTraining(tiny_condenser_config(skip_from=2)).eval()
    batch = random_mlm_batch()
    hooked = {}

    def perturb_tokens_of_last_layer(module, args, output):
        perturbed = output.clone()
        perturbed[:, 1:] += 10.0
        hooked["done"] = True
        return perturbed

    with torch.no_grad():
        baseline = model(**batch)
        handle = model.bert.encoder.layer[-1].register_forward_hook(perturb_tokens_of_last_layer)
        perturbed = model(**batch)
        handle.remove()
    assert hooked["done"]
    torch.testing.assert_close(perturbed.head_mlm_loss, baseline.head_mlm_loss)
    assert not torch.allclose(perturbed.late_mlm_loss, baseline.late_mlm_loss)


def test_no_masked_tokens_gives_zero_loss_with_graph():
    model = CondenserForPreTraining(tiny_condenser_config())
    batch = random_mlm_batch()
    batch["labels"].fill_(-100)
    output = model(**batch)
    assert float(output.loss.detach()) == 0.0
    output.loss.backward()  # finite, differentiable


# ---------------------------------------------------------------------------- checkpoints


def test_save_pretrained_is_safetensors_only_and_restores_head(tmp_path):
    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config())
    model.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert "model.safetensors" in names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as checkpoint:
        assert any(key.startswith("c_head.") for key in checkpoint.keys())
    loaded = CoCondenserForPreTraining.from_pretrained(tmp_path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    batch = random_mlm_batch()
    model.eval(), loaded.eval()
    torch.testing.assert_close(loaded(**batch).loss, model(**batch).loss)


def test_headless_checkpoint_warns_that_head_is_fresh(tmp_path):
    CondenserModel(tiny_condenser_config()).save_pretrained(tmp_path)
    logger = hf_logging.get_logger(modeling_condenser.__name__)
    with CaptureLogger(logger) as captured:
        CondenserForPreTraining.from_pretrained(tmp_path)
    assert "FRESHLY INITIALISED" in captured.out and "c_head" in captured.out


def test_checkpoint_with_head_does_not_warn(tmp_path):
    CondenserForPreTraining(tiny_condenser_config()).save_pretrained(tmp_path)
    logger = hf_logging.get_logger(modeling_condenser.__name__)
    with CaptureLogger(logger) as captured:
        CondenserForPreTraining.from_pretrained(tmp_path)
    assert "FRESHLY" not in captured.out


@pytest.mark.numerics
def test_export_backbone_is_a_plain_bert(tmp_path):
    torch.manual_seed(0)
    model = CondenserForPreTraining(tiny_condenser_config()).double().eval()  # float64: see conftest
    model.export_backbone(tmp_path)
    assert not list(tmp_path.glob("*.py"))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and "auto_map" not in config and "skip_from" not in config
    plain = BertForMaskedLM.from_pretrained(tmp_path).eval()
    assert plain.dtype == torch.float64  # the export keeps the model's precision
    batch = random_mlm_batch()
    with torch.no_grad():
        ours = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        theirs = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        torch.testing.assert_close(theirs.hidden_states[-1], ours.last_hidden_state, **FLOAT64_TOLERANCE)
        torch.testing.assert_close(theirs.logits, model.cls(ours.last_hidden_state), **FLOAT64_TOLERANCE)
    encoder_dir = tmp_path / "encoder"
    model.bert.export_backbone(encoder_dir)
    bert = AutoModel.from_pretrained(encoder_dir).eval()
    assert type(bert) is BertModel
    with torch.no_grad():
        torch.testing.assert_close(
            bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state,
            ours.last_hidden_state, **FLOAT64_TOLERANCE,
        )


def test_auto_classes_work_without_trust_remote_code_once_imported(tmp_path):
    CoCondenserForPreTraining(tiny_condenser_config()).save_pretrained(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)) is CondenserModel
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path)) is CondenserForPreTraining


# ---------------------------------------------------------------------------- coCondenser loss


def naive_span_contrastive_loss(spans: torch.Tensor) -> torch.Tensor:
    """Row by row: -log softmax over all OTHER spans, target = sibling (pairs 2k, 2k+1)."""
    losses = []
    for i in range(spans.shape[0]):
        others = [j for j in range(spans.shape[0]) if j != i]
        logits = torch.stack([spans[i] @ spans[j] for j in others])
        sibling = others.index(i + 1 if i % 2 == 0 else i - 1)
        losses.append(-torch.log_softmax(logits, dim=0)[sibling])
    return torch.stack(losses).mean()


@pytest.mark.numerics
@pytest.mark.parametrize("num_spans", [2, 6, 10])
def test_span_contrastive_loss_matches_naive_reference(num_spans):
    spans = torch.randn(num_spans, 8, generator=torch.Generator().manual_seed(num_spans), dtype=torch.float64)
    loss = span_contrastive_loss(spans)
    assert loss.dtype == torch.float64  # computed in the spans' precision, never below
    torch.testing.assert_close(loss, naive_span_contrastive_loss(spans), **FLOAT64_TOLERANCE)
    assert span_contrastive_loss(spans.bfloat16()).dtype == torch.float32  # half precision: at least float32


def test_span_contrastive_loss_rejects_odd_batches():
    with pytest.raises(ValueError, match="sibling pairs.*7 spans.*CoCondenserCollator"):
        span_contrastive_loss(torch.randn(7, 4))


@pytest.mark.numerics
def test_cocondenser_output_sums_all_losses():
    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config()).double().eval()  # float64: see conftest
    batch = random_mlm_batch(batch_size=6)
    output = model(**batch)
    assert output.contrastive_spans == 6 and output.loss.dtype == torch.float64
    torch.testing.assert_close(output.contrastive_loss, naive_span_contrastive_loss(output.pooler_output),
                               **FLOAT64_TOLERANCE)
    torch.testing.assert_close(output.loss, output.head_mlm_loss + output.late_mlm_loss + output.contrastive_loss,
                               **FLOAT64_TOLERANCE)


# ---------------------------------------------------------------------------- attention back-ends, checkpointing


@pytest.mark.numerics
@pytest.mark.parametrize("architecture", [CondenserForPreTraining, CoCondenserForPreTraining])
def test_eager_and_sdpa_attention_give_the_same_losses(architecture, tmp_path):
    torch.manual_seed(0)
    architecture(tiny_condenser_config()).double().save_pretrained(tmp_path)  # float64: see conftest
    batch = random_mlm_batch(batch_size=6)
    losses = {}
    for implementation in ("eager", "sdpa"):
        model = architecture.from_pretrained(tmp_path, attn_implementation=implementation).eval()
        assert model.config._attn_implementation == implementation and model.dtype == torch.float64
        with torch.no_grad():
            losses[implementation] = model(**batch)
    for name in ("head_mlm_loss", "late_mlm_loss", "loss"):
        torch.testing.assert_close(losses["eager"][name], losses["sdpa"][name], **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config()).double()  # float64: see conftest
    model.train()
    batch = random_mlm_batch(batch_size=6)
    model(**batch).loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model(**batch).loss.backward()
    assert len(reference) > 60
    for name, grad in reference.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, **FLOAT64_TOLERANCE, msg=name)


def test_settings_changed_after_construction_are_checked_by_the_model():
    config = tiny_condenser_config()
    config.skip_from = 4
    with pytest.raises(ValueError, match="skip_from=4"):
        CondenserForPreTraining(config)


# ---------------------------------------------------------------------------- transformers' output conventions


def labelled_output_fields(architecture) -> list[str]:
    """The fields a labelled batch fills, in the order transformers puts them in a tuple: the loss first."""
    losses = ["loss", "head_mlm_loss", "late_mlm_loss"]
    if architecture is CoCondenserForPreTraining:
        losses += ["contrastive_loss", "contrastive_spans"]
    return losses + ["pooler_output", "last_hidden_state"]


@pytest.mark.parametrize("where", ["call", "config"])
@pytest.mark.parametrize("architecture", [CondenserForPreTraining, CoCondenserForPreTraining])
def test_return_dict_false_gives_a_tuple_with_the_loss_first(architecture, where):
    torch.manual_seed(0)
    model = architecture(tiny_condenser_config()).eval()
    batch = random_mlm_batch()
    with torch.no_grad():
        reference = model(**batch, return_dict=True)
        if where == "config":
            model.config.return_dict = False
        output = model(**batch, return_dict=False) if where == "call" else model(**batch)
    assert isinstance(output, tuple)
    fields = labelled_output_fields(architecture)
    assert len(output) == len(fields)
    assert output[0].dim() == 0 and torch.equal(output[0], reference.loss)
    for name, value in zip(fields, output):
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(reference[name])), name
    with torch.no_grad():  # the keyword wins over the config
        assert isinstance(model(**batch, return_dict=True), modeling_condenser.CondenserForPreTrainingOutput)


def test_condenser_model_follows_return_dict_in_the_config():
    torch.manual_seed(0)
    model = CondenserModel(tiny_condenser_config(return_dict=False)).eval()
    batch = random_mlm_batch()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        output = model(**inputs)
        reference = model(**inputs, return_dict=True)
    assert isinstance(output, tuple) and len(output) == 2
    assert torch.equal(output[0], reference.last_hidden_state) and torch.equal(output[1], reference.pooler_output)


@pytest.mark.parametrize("architecture", [CondenserForPreTraining, CoCondenserForPreTraining])
def test_output_flags_default_to_the_config(architecture):
    torch.manual_seed(0)
    config = tiny_condenser_config(output_hidden_states=True, output_attentions=True)
    config._attn_implementation = "eager"  # attention weights come from the eager path
    model = architecture(config).eval()
    batch = random_mlm_batch()
    with torch.no_grad():
        from_config = model(**batch)
        by_keyword = model(**batch, output_hidden_states=True, output_attentions=True)
        turned_off = model(**batch, output_hidden_states=False, output_attentions=False)
    layers = config.num_hidden_layers
    assert len(from_config.hidden_states) == layers + 1 and len(from_config.attentions) == layers
    for mine, theirs in zip(from_config.hidden_states + from_config.attentions,
                            by_keyword.hidden_states + by_keyword.attentions):
        assert torch.equal(mine, theirs)
    assert turned_off.hidden_states is None and turned_off.attentions is None


@pytest.mark.parametrize(("selection", "kept"), [([0, 2], [0, 2]), (-1, [4]), ((1, -2, 9), [1, 3])])
@pytest.mark.parametrize("architecture", [CondenserModel, CondenserForPreTraining, CoCondenserForPreTraining])
def test_output_hidden_states_selects_as_bert_model_does(architecture, selection, kept):
    torch.manual_seed(0)
    model = architecture(tiny_condenser_config()).eval()
    encoder = model if architecture is CondenserModel else model.bert
    bert = BertModel(BertConfig(**{k: v for k, v in model.config.to_dict().items() if k in BertConfig().to_dict()}),
                     add_pooling_layer=False).eval()
    bert.load_state_dict(encoder.state_dict())
    batch = random_mlm_batch()
    if architecture is CondenserModel:
        batch.pop("labels")
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=selection).hidden_states
        reference = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         output_hidden_states=selection).hidden_states
    # the embedding output and the 4 layers; the ones not selected are None (negative indices from the end)
    assert len(ours) == len(reference) == 5
    assert [index for index, state in enumerate(ours) if state is not None] == kept
    assert [index for index, state in enumerate(reference) if state is not None] == kept
    for index in kept:
        torch.testing.assert_close(ours[index], reference[index], atol=float32_atol(reference[index], depth=5), rtol=0)


@pytest.mark.parametrize("architecture", [CondenserModel, CondenserForPreTraining])
def test_output_hidden_states_not_an_index_is_a_one_line_type_error(architecture):
    model = architecture(tiny_condenser_config()).eval()
    batch = random_mlm_batch()
    batch.pop("labels")
    with pytest.raises(TypeError, match=r"^output_hidden_states='all': pass True / False, or the index") as raised:
        model(**batch, output_hidden_states="all")
    assert "\n" not in str(raised.value)
