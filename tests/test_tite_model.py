"""TiteModel against independent references: BertModel, a naive per-text TITE, batch invariance."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT64_TOLERANCE, float32_atol
from transformers import BertConfig, BertModel

from dense_encoders.checkpoints.backbones import bert_to_tite_state_dict, tite_from_backbone
from dense_encoders.models.tite.modeling_tite import TiteForPreTraining, TiteModel
from dense_encoders.models.tite.presets import TINY_PRESETS, tite_preset

TINY = sorted(TINY_PRESETS)


def tiny_model(name: str, implementation: str = "sdpa", **overrides) -> TiteModel:
    torch.manual_seed(0)
    config = tite_preset(name, vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         pooling_implementation="torch", **overrides)
    config._attn_implementation = implementation
    return TiteModel(config).eval()


def random_texts(count: int, max_len: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (count,), generator=generator).tolist()
    lengths[0] = max_len
    return [torch.randint(1, 50, (n,), generator=generator) for n in lengths]


def batch_of(texts: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    width = max(len(t) for t in texts)
    input_ids = torch.zeros(len(texts), width, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, text in enumerate(texts):
        input_ids[row, : len(text)] = text
        attention_mask[row, : len(text)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


# ---------------------------------------------------------------------------- without pooling = BERT


def bert_and_tite_on_the_same_weights(implementation: str = "sdpa") -> tuple[BertModel, TiteModel]:
    """A tiny BertModel and the TITE without pooling that holds its weights, both float64 (see conftest)."""
    bert_config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    bert = BertModel._from_config(bert_config, attn_implementation=implementation).double().eval()
    model = tiny_model("tiny-tite-no-pooling", implementation, position_embedding_type="absolute",
                       type_vocab_size=2).double()
    missing, unexpected = model.load_state_dict(bert_to_tite_state_dict(bert.state_dict()), strict=False)
    assert not missing and not unexpected
    return bert, model


@pytest.mark.numerics
def test_no_pooling_absolute_positions_equals_bert_on_the_same_weights():
    bert, model = bert_and_tite_on_the_same_weights()
    batch = batch_of(random_texts(4, 16))
    with torch.no_grad():
        ours = model(**batch).last_hidden_state
        theirs = bert(**batch).last_hidden_state
    valid = batch["attention_mask"].bool()
    assert ours.dtype == theirs.dtype == torch.float64
    torch.testing.assert_close(ours[valid], theirs[valid], **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_hidden_states_and_attentions_without_pooling_equal_berts():
    """Every layer's states and attention weights, as BERT's eager implementation gives them (the longest text
    fills the batch, so the rows line up with BERT's; padded query rows differ: BERT attends from its pad tokens)."""
    bert, model = bert_and_tite_on_the_same_weights("eager")
    batch = batch_of(random_texts(4, 16, seed=10))
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=True, output_attentions=True)
        theirs = bert(**batch, output_hidden_states=True, output_attentions=True)
    valid = batch["attention_mask"].bool()
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3 and len(ours.attentions) == 2
    for mine, mask, reference in zip(ours.hidden_states, ours.hidden_states_masks, theirs.hidden_states, strict=True):
        assert torch.equal(mask, batch["attention_mask"])
        torch.testing.assert_close(mine[valid], reference[valid], **FLOAT64_TOLERANCE)
        assert not mine[~valid].any()
    for mine, reference in zip(ours.attentions, theirs.attentions, strict=True):
        assert mine.shape == reference.shape == (4, 4, 16, 16)
        torch.testing.assert_close(mine.transpose(1, 2)[valid], reference.transpose(1, 2)[valid], **FLOAT64_TOLERANCE)
    torch.testing.assert_close(ours.hidden_states[-1], ours.last_hidden_state, **FLOAT64_TOLERANCE)


# ---------------------------------------------------------------------------- naive per-text reference


def naive_pool(states: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    length = states.shape[0]
    count = math.ceil(max(0, length - kernel) / stride) + 1
    return torch.stack([states[i * stride : min(i * stride + kernel, length)].mean(0) for i in range(count)])


def naive_rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x (len, heads, dim): rotate pairs (j, j + dim/2) by position * theta^(-2j/dim)."""
    dim = x.shape[-1]
    out = x.clone()
    for j in range(dim // 2):
        angle = positions * theta ** (-2 * j / dim)
        cos, sin = angle.cos()[:, None], angle.sin()[:, None]
        out[..., j] = x[..., j] * cos - x[..., j + dim // 2] * sin
        out[..., j + dim // 2] = x[..., j + dim // 2] * cos + x[..., j] * sin
    return out


def naive_tite(model: TiteModel, ids: torch.Tensor) -> torch.Tensor:
    """One text, no batching or packing: the paper's layer equations written out."""
    return naive_tite_layers(model, ids)[0][-1]


def naive_tite_layers(model: TiteModel, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """:func:`naive_tite`'s states entering the first layer and after every layer, and every layer's attention
    probabilities (heads, queries, keys)."""
    config = model.config
    embeddings = model.embeddings
    states = embeddings.word_embeddings(ids)
    if embeddings.embedding_projection is not None:
        states = embeddings.embedding_projection(states)
    states = embeddings.LayerNorm(states)
    all_states, all_probabilities = [states], []
    for layer in model.layers:
        attention = layer.attention
        kernel, stride, location = attention.kernel_size, attention.stride, config.pooling_location
        heads, width = attention.heads, attention.width
        keys_in = states
        key_pos = torch.arange(states.shape[0], dtype=torch.float64)
        if kernel is not None and location in ("pre", "intra"):
            queries_in = naive_pool(states, kernel, stride)
            query_pos = torch.arange(queries_in.shape[0], dtype=torch.float64) * stride + (kernel - 1) / 2
            if location == "pre":
                keys_in, key_pos = queries_in, torch.arange(queries_in.shape[0], dtype=torch.float64)
                query_pos = key_pos
        else:
            queries_in, query_pos = states, key_pos
        q = attention.query(queries_in).view(-1, heads, width // heads)
        k = attention.key(keys_in).view(-1, heads, width // heads)
        v = attention.value(keys_in).view(-1, heads, width // heads)
        if config.position_embedding_type == "rotary":
            q, k = naive_rotary(q, query_pos, config.rope_theta), naive_rotary(k, key_pos, config.rope_theta)
        probabilities = (torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(width // heads)).softmax(-1)
        attended = torch.einsum("hqk,khd->qhd", probabilities, v).reshape(-1, width)
        hidden = attention.dense(attended) + F.pad(queries_in, (0, width - queries_in.shape[-1]))
        if kernel is not None and location == "post":
            hidden = naive_pool(hidden, kernel, stride)
        hidden = attention.LayerNorm(hidden)
        states = layer.LayerNorm(layer.output(layer.activation(layer.intermediate(hidden))) + hidden)
        all_states.append(states)
        all_probabilities.append(probabilities)
    return all_states, all_probabilities


@pytest.mark.numerics
@pytest.mark.parametrize("name", [n for n in TINY if n != "tiny-tite-no-pooling"])
def test_matches_naive_per_text_reference(name):
    """float64 end to end (the rotary table follows the model's dtype), so agreement is to rounding."""
    model = tiny_model(name, implementation="eager").double()
    texts = random_texts(5, model.config.max_position_embeddings, seed=1)
    with torch.no_grad():
        output = model(**batch_of(texts))
        assert output.pooler_output.dtype == torch.float64
        for row, text in enumerate(texts):
            expected = naive_tite(model, text)
            assert expected.shape == (1, model.config.hidden_size)
            torch.testing.assert_close(output.pooler_output[row], expected[0], **FLOAT64_TOLERANCE)
    assert output.last_hidden_state.shape == (5, 1, model.config.hidden_size)


# ---------------------------------------------------------------------------- batch invariance


@pytest.mark.numerics
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", TINY)
def test_embeddings_do_not_depend_on_the_batch(name, implementation):
    model = tiny_model(name, implementation=implementation).double()  # float64: see conftest
    texts = random_texts(6, model.config.max_position_embeddings, seed=2)
    with torch.no_grad():
        together = model(**batch_of(texts)).pooler_output
        alone = torch.stack([model(**batch_of([t])).pooler_output[0] for t in texts])
        order = [3, 0, 5, 1, 4, 2]
        shuffled = model(**batch_of([texts[i] for i in order])).pooler_output
    torch.testing.assert_close(together, alone, **FLOAT64_TOLERANCE)
    torch.testing.assert_close(shuffled, together[order], **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_eager_and_sdpa_agree():
    texts = random_texts(4, 16, seed=3)
    with torch.no_grad():  # float64: see conftest
        eager = tiny_model("tiny-tite-2-late", "eager").double()(**batch_of(texts)).pooler_output
        sdpa = tiny_model("tiny-tite-2-late", "sdpa").double()(**batch_of(texts)).pooler_output
    assert eager.dtype == sdpa.dtype == torch.float64
    torch.testing.assert_close(eager, sdpa, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["tiny-tite-2-late", "tiny-tite-3-staggered"])
def test_triton_and_torch_pooling_give_the_same_model(name, monkeypatch, triton_interpreter):
    """The whole model with the Triton kernels (CPU interpreter here) vs the PyTorch pooling, with gradients."""
    pytest.importorskip("triton", reason="the triton extra is not installed: only the PyTorch pooling can run")
    from dense_encoders.models.tite import pooling_tite

    calls = []
    original = pooling_tite.TritonPackedPool.apply
    monkeypatch.setattr(pooling_tite.TritonPackedPool, "apply", lambda *a: calls.append(1) or original(*a))
    texts = random_texts(4, 16, seed=4)
    outputs, grads = {}, {}
    for implementation in ("torch", "triton"):
        model = tiny_model(name, "eager").double()  # float64 (Triton's interpreter supports it): see conftest
        model.config.pooling_implementation = implementation
        output = model(**batch_of(texts)).pooler_output
        output.square().sum().backward()
        outputs[implementation] = output.detach()
        grads[implementation] = model.embeddings.word_embeddings.weight.grad.clone()
    assert calls  # the kernels really ran
    assert outputs["triton"].dtype == grads["triton"].dtype == torch.float64
    torch.testing.assert_close(outputs["triton"], outputs["torch"], **FLOAT64_TOLERANCE)
    torch.testing.assert_close(grads["triton"], grads["torch"], **FLOAT64_TOLERANCE)


# ---------------------------------------------------------------------------- transformers' outputs and keywords


@pytest.mark.numerics
@pytest.mark.parametrize("name", TINY)
def test_hidden_states_and_attentions_match_the_naive_reference_layer_by_layer(name):
    """Funnel Transformer's convention: every layer's states at that layer's length, with the masks that say
    which rows are real; the attention weights of every layer (eager)."""
    model = tiny_model(name, implementation="eager").double()  # float64: see conftest
    layers = model.config.num_hidden_layers
    texts = random_texts(5, model.config.max_position_embeddings, seed=7)
    with torch.no_grad():
        output = model(**batch_of(texts), output_hidden_states=True, output_attentions=True)
    assert len(output.hidden_states) == len(output.hidden_states_masks) == layers + 1
    assert len(output.attentions) == layers
    references = [naive_tite_layers(model, text) for text in texts]
    for index, (hidden, mask) in enumerate(zip(output.hidden_states, output.hidden_states_masks, strict=True)):
        lengths = [states[index].shape[0] for states, _ in references]
        assert hidden.shape == (5, max(lengths), model.config.hidden_sizes[max(index - 1, 0)])
        assert mask.tolist() == [[1] * n + [0] * (max(lengths) - n) for n in lengths]
        for row, (states, _) in enumerate(references):
            torch.testing.assert_close(hidden[row, : lengths[row]], states[index], **FLOAT64_TOLERANCE)
        assert not hidden[~mask.bool()].any()
    for index, attention in enumerate(output.attentions):
        for row, (_, probabilities) in enumerate(references):
            heads, queries, keys = probabilities[index].shape
            assert attention.shape[1] == heads
            torch.testing.assert_close(attention[row, :, :queries, :keys], probabilities[index], **FLOAT64_TOLERANCE)
            assert not attention[row, :, :queries, keys:].any()  # padded keys get no weight
    if model.config.pools_to_one_vector:
        torch.testing.assert_close(output.hidden_states[-1][:, 0], output.pooler_output, **FLOAT64_TOLERANCE)
    else:
        torch.testing.assert_close(output.hidden_states[-1], output.last_hidden_state, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_output_flags_follow_the_config_select_indices_and_leave_the_vectors_alone():
    texts = random_texts(4, 16, seed=11)
    eager = tiny_model("tiny-tite-2-late", "eager").double()
    with torch.no_grad():
        expected = eager(**batch_of(texts), output_hidden_states=True, output_attentions=True)
        model = tiny_model("tiny-tite-2-late", "sdpa").double()
        plain = model(**batch_of(texts))
        assert plain.hidden_states is None and plain.attentions is None
        # sdpa has no weights: a call that asks for them computes its attention in the eager implementation
        asked = model(**batch_of(texts), output_hidden_states=True, output_attentions=True)
        model.config.output_hidden_states = True  # the config's flags when the call gives none, as in transformers
        from_config = model(**batch_of(texts))
        selected = model(**batch_of(texts), output_hidden_states=[0, -1])
    torch.testing.assert_close(asked.pooler_output, plain.pooler_output, **FLOAT64_TOLERANCE)
    for mine, reference in zip(asked.attentions, expected.attentions, strict=True):
        torch.testing.assert_close(mine, reference, **FLOAT64_TOLERANCE)
    for output in (asked, from_config):
        for mine, reference in zip(output.hidden_states, expected.hidden_states, strict=True):
            torch.testing.assert_close(mine, reference, **FLOAT64_TOLERANCE)
    assert from_config.attentions is None
    assert [hidden is None for hidden in selected.hidden_states] == [False, True, True, True, True, False]
    torch.testing.assert_close(selected.hidden_states[-1], expected.hidden_states[-1], **FLOAT64_TOLERANCE)
    assert torch.equal(selected.hidden_states_masks[0], expected.hidden_states_masks[0])


def test_hidden_states_and_attentions_carry_gradients():
    """As BERT's: the output is computed from the returned tensors, so ``retain_grad`` on them gets a gradient
    (none at padded rows)."""
    model = tiny_model("tiny-tite-2-late-upscale", "eager")
    output = model(**batch_of(random_texts(3, 16, seed=8)), output_hidden_states=True, output_attentions=True)
    for tensor in output.hidden_states + output.attentions:
        tensor.retain_grad()
    output.pooler_output.square().sum().backward()
    for hidden, mask in zip(output.hidden_states, output.hidden_states_masks, strict=True):
        assert hidden.grad is not None and hidden.grad[mask.bool()].abs().sum() > 0
        assert not hidden.grad[~mask.bool()].any()
    for attention in output.attentions:
        assert attention.grad is not None and attention.grad.abs().sum() > 0


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["tiny-tite-2-late-upscale", "tiny-tite-2-late-pre"])
def test_states_before_the_first_pooling_come_at_the_inputs_length(name):
    """A batch padded on the right past its longest text (``padding="max_length"``): the hidden states and
    attention weights up to the first pooling come at the input's length, as BERT's and Funnel's do, their real
    rows those of the same texts without the extra padding, zeros (no weight) after them; the pooled layers and
    the vectors are those of the trimmed batch. (The upscale preset pools from layer 2, intra; "pre" from layer 1.)"""
    model = tiny_model(name, implementation="eager").double()  # float64: see conftest
    trimmed = batch_of(random_texts(3, 9, seed=21))  # the longest text fills the trimmed batch: 9 tokens
    padded = {key: F.pad(value, (0, 16 - value.shape[1])) for key, value in trimmed.items()}  # to 16 positions
    with torch.no_grad():
        expected = model(**trimmed, output_hidden_states=True, output_attentions=True)
        output = model(**padded, output_hidden_states=True, output_attentions=True)
    opening = next(index for index, kernel in enumerate(model.config.kernel_sizes) if kernel is not None)
    valid = padded["attention_mask"].bool()
    for index, (hidden, mask, reference) in enumerate(zip(output.hidden_states, output.hidden_states_masks,
                                                          expected.hidden_states, strict=True)):
        if index <= opening:  # the embeddings' output and every layer's before the first pooling
            assert hidden.shape[:2] == mask.shape == (3, 16)
            assert torch.equal(mask, padded["attention_mask"])
            torch.testing.assert_close(hidden[valid], reference[trimmed["attention_mask"].bool()],
                                       **FLOAT64_TOLERANCE)
            assert not hidden[~valid].any()
        else:  # pooled: at the pooled lengths of the real texts, as before
            assert hidden.shape == reference.shape
            torch.testing.assert_close(hidden, reference, **FLOAT64_TOLERANCE)
    for index, (attention, reference) in enumerate(zip(output.attentions, expected.attentions, strict=True)):
        # the first pooling layer's keys are its input's rows under "intra" pooling, its pooled rows under "pre"
        keys_unpooled = index < opening or index == opening and model.config.pooling_location == "intra"
        queries, keys = 16 if index < opening else reference.shape[2], 16 if keys_unpooled else reference.shape[3]
        expected_shape = (*reference.shape[:2], queries, keys)
        assert attention.shape == expected_shape
        torch.testing.assert_close(attention[..., : reference.shape[2], : reference.shape[3]], reference,
                                   **FLOAT64_TOLERANCE)
        assert not attention[..., reference.shape[3]:].any()  # the extra padding gets no weight
    torch.testing.assert_close(output.last_hidden_state, expected.last_hidden_state, **FLOAT64_TOLERANCE)
    torch.testing.assert_close(output.pooler_output, expected.pooler_output, **FLOAT64_TOLERANCE)


def test_return_dict_false_in_the_config_or_the_call_gives_a_tuple():
    batch = batch_of(random_texts(3, 16, seed=12))
    model = tiny_model("tiny-tite-2-late")
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True, output_attentions=True)
        called = model(**batch, return_dict=False)
        model.config.return_dict = False
        configured = model(**batch, output_hidden_states=True, output_attentions=True)
        overridden = model(**batch, return_dict=True)
    assert isinstance(called, tuple) and len(called) == 2
    torch.testing.assert_close(called[0], expected.last_hidden_state)
    torch.testing.assert_close(called[1], expected.pooler_output)
    assert isinstance(configured, tuple) and len(configured) == len(expected.to_tuple()) == 5
    for mine, reference in zip(configured, expected.to_tuple(), strict=True):  # attentions last, as in transformers
        torch.testing.assert_close(mine, reference)
    assert not isinstance(overridden, tuple)


def test_unknown_keywords_are_a_type_error():
    batch = batch_of(random_texts(2, 16, seed=13))
    model = tiny_model("tiny-tite-2-late")
    with pytest.raises(TypeError, match="some_typo_argument"):
        model(**batch, some_typo_argument=123)
    with pytest.raises(TypeError, match="output_hidden_state"):
        model(**batch, output_hidden_state=True)


def test_output_flags_on_a_batch_with_empty_texts_are_refused_in_one_line():
    model = tiny_model("tiny-tite-2-late", empty_texts="zeros")
    batch = {"input_ids": torch.ones((2, 3), dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [0, 0, 0]])}
    assert model(**batch).pooler_output.shape == (2, 32)
    with pytest.raises(ValueError, match="empty texts") as error:
        model(**batch, output_hidden_states=True)
    assert "\n" not in str(error.value)


def test_short_texts_give_the_skipped_q_and_k_their_exact_gradient_zero():
    """Where a layer's queries each see one key, attention is the value projection and Q / K are skipped; in training
    they still get a gradient, exactly zero, so that every parameter is in every backward (DDP without unused-
    parameter detection waits for each one on every process)."""
    model = tiny_model("tiny-tite-2-late").train()
    batch = batch_of(random_texts(5, 4, seed=3))
    skipped = [index for index, layer in enumerate(model.plan(**batch).layers) if layer.key.max_length == 1]
    assert skipped == [3, 4]  # 4 tokens -> 4, 2, 1 before layers 1-3 (kernel 2 from layer 1 on)
    model(**batch).pooler_output.square().sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        projection = name.split(".")[3] if name.startswith("layers.") and ".attention." in name else None
        zero = projection in ("query", "key") and int(name.split(".")[1]) in skipped
        assert bool((parameter.grad == 0).all()) == zero, name


# ---------------------------------------------------------------------------- pre-training model


def tiny_pretraining(name: str = "tiny-tite-2-late", **overrides) -> TiteForPreTraining:
    torch.manual_seed(0)
    config = tite_preset(name, vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         pooling_implementation="torch", **overrides)
    return TiteForPreTraining(config).eval()


@pytest.mark.parametrize("tied", [True, False])
def test_pretraining_model_resizes_its_token_embeddings(tied, tmp_path):
    """Adding tokens before pre-training (Lightning IR's [QUE] / [DOC] markers): the word table and both
    decoders grow, keep their rows, stay tied where they were, and the model runs on the new ids."""
    model = tiny_pretraining(tie_word_embeddings=tied)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    table = model.resize_token_embeddings(52)
    assert model.config.vocab_size == 52 and table is model.tite.embeddings.word_embeddings
    assert table.weight.shape == (52, 32)
    assert torch.equal(table.weight[:50], before["tite.embeddings.word_embeddings.weight"])
    for head in ("mae_head", "bow_head"):
        decoder = getattr(model, head).decoder
        assert (decoder.weight is table.weight) == tied
        assert decoder.weight.shape == (52, 32) and decoder.bias.shape == (52,) and decoder.out_features == 52
        assert torch.equal(decoder.weight[:50], before[f"{head}.decoder.weight"])
        assert torch.equal(decoder.bias[:50], before[f"{head}.decoder.bias"])
    batch = batch_of(random_texts(3, 16, seed=14))
    batch["input_ids"][:, 1] = torch.tensor([50, 51, 50])  # the new tokens
    with torch.no_grad():
        output = model(**batch)
    assert torch.isfinite(output.loss)
    model.save_pretrained(tmp_path)
    loaded = TiteForPreTraining.from_pretrained(tmp_path).eval()
    assert loaded.config.vocab_size == 52
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).loss, output.loss, atol=0, rtol=0)
    model.resize_token_embeddings(48)  # and shrink
    batch["input_ids"].clamp_(max=47)
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    assert model.bow_head.decoder.weight.shape == (48, 32) and model.get_output_embeddings().bias.shape == (48,)


def test_pretraining_loss_in_eval_is_reproducible_and_training_samples_the_decoder_mask():
    model = tiny_pretraining()
    batch = batch_of(random_texts(4, 16, seed=15))
    with torch.no_grad():
        torch.manual_seed(1)
        first = model(**batch).loss
        torch.manual_seed(2)
        state = torch.get_rng_state()
        second = model(**batch).loss
        assert torch.equal(torch.get_rng_state(), state)  # evaluation leaves the global generator alone
        model.train()  # no dropout in this config: only the decoder mask is random
        torch.manual_seed(1)
        losses = {model(**batch).loss.item() for _ in range(3)}
    assert torch.equal(first, second)
    assert len(losses) == 3


def test_pretraining_model_returns_tuples_with_the_loss_first_and_the_encoders_outputs():
    batch = batch_of(random_texts(3, 16, seed=16))
    model = tiny_pretraining()
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True, output_attentions=True)
        encoder = model.tite(**batch, output_hidden_states=True, output_attentions=True)
        called = model(**batch, return_dict=False)
        model.config.return_dict = False
        configured = model(**batch)
    fields = (expected.loss, expected.mae_loss, expected.bow_loss, expected.pooler_output)
    for output in (called, configured):
        assert isinstance(output, tuple) and len(output) == 4
        for mine, reference in zip(output, fields, strict=True):
            torch.testing.assert_close(mine, reference)
    for name in ("hidden_states", "hidden_states_masks", "attentions"):
        for mine, reference in zip(getattr(expected, name), getattr(encoder, name), strict=True):
            torch.testing.assert_close(mine, reference)
    with pytest.raises(TypeError, match="some_typo_argument"):
        model(**batch, some_typo_argument=123)


def test_bad_inputs_are_rejected():
    model = tiny_model("tiny-tite-2-late")
    with pytest.raises(ValueError, match="at least one token"):
        model(input_ids=torch.zeros((2, 0), dtype=torch.long))
    with pytest.raises(ValueError, match="no tokens"):
        model(input_ids=torch.ones((2, 3), dtype=torch.long), attention_mask=torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="max_position_embeddings=16; truncate"):
        model(input_ids=torch.ones((1, 17), dtype=torch.long))


# ---------------------------------------------------------------------------- saving, remote code, back-ends


@pytest.fixture
def saved_tite(tmp_path):
    from dense_encoders.tokenization import load_tokenizer

    tokenizer = load_tokenizer()
    tokenizer.model_max_length = 16
    torch.manual_seed(0)
    model = TiteModel(tite_preset("tiny-tite-2-staggered", vocab_size=len(tokenizer))).eval()
    folder = tmp_path / "tite"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # save_pretrained wrote the sentence-transformers files (CLS, dot product)
    texts = ["dense retrieval", "a token independent text encoder pools to one vector"]
    with torch.no_grad():
        expected = model(**tokenizer(texts, padding=True, truncation=True, return_tensors="pt")).pooler_output
    return folder, texts, expected


@pytest.mark.numerics
@pytest.mark.slow
def test_tite_loads_as_remote_code_without_the_package(saved_tite, tmp_path):
    from conftest import run_python_without_package

    folder, texts, expected = saved_tite
    shipped = {"modeling_tite.py", "configuration_tite.py", "plan_tite.py", "pooling_tite.py", "rotary_tite.py",
               "fused_tite.py", "cuda_graphs_tite.py", "sentence_transformers_tite.py", "modules.json", "1_Pooling"}
    assert shipped <= {p.name for p in folder.iterdir()}
    code = f"""
import torch
from transformers import AutoModel, AutoTokenizer
from sentence_transformers import SentenceTransformer
folder, texts = {str(folder)!r}, {texts!r}
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager").eval()
assert model.config._attn_implementation == "eager"
with torch.no_grad():
    eager = model(**tokenizer(texts, padding=True, truncation=True, return_tensors="pt")).pooler_output
    model.set_attn_implementation("sdpa")
    sdpa = model(**tokenizer(texts, padding=True, truncation=True, return_tensors="pt")).pooler_output
st = SentenceTransformer(folder, trust_remote_code=True, device="cpu").encode(texts, convert_to_tensor=True)
torch.save({{"eager": eager, "sdpa": sdpa, "st": st.cpu(), "module": type(model).__module__}},
           {str(tmp_path / "out.pt")!r})
"""
    run_python_without_package(code, cwd=tmp_path)
    result = torch.load(tmp_path / "out.pt")
    assert "transformers_modules" in result["module"]
    for key in ("eager", "sdpa", "st"):
        torch.testing.assert_close(result[key], expected, atol=1e-5, rtol=0, msg=key)


def test_flash_attention_without_flash_attn_is_a_clear_error(saved_tite):
    try:
        import flash_attn  # noqa: F401
        pytest.skip("flash-attn is installed here")
    except ImportError:
        pass
    folder, _, _ = saved_tite
    with pytest.raises(ImportError, match="FlashAttention2"):
        TiteModel.from_pretrained(folder, attn_implementation="flash_attention_2")


def test_auto_model_without_trust_remote_code_once_imported(saved_tite):
    from transformers import AutoModel

    folder, _, _ = saved_tite
    assert type(AutoModel.from_pretrained(folder)) is TiteModel


# ---------------------------------------------------------------------------- warm start from BERT


@pytest.mark.numerics
@pytest.mark.parametrize("type_vocab_size", [2, 0])
def test_warm_start_without_pooling_reproduces_the_backbone(minilm_path, type_vocab_size):
    from transformers import AutoTokenizer

    model = tite_from_backbone(minilm_path, type_vocab_size=type_vocab_size).eval()
    bert = BertModel.from_pretrained(minilm_path, add_pooling_layer=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(["warm starts copy every layer", "a short one"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        theirs = bert(**batch).last_hidden_state
    valid = batch["attention_mask"].bool()
    # float32 is the point (the real weights as shipped): k * eps32 * max|state| * sqrt(layers)
    atol = float32_atol(theirs[valid], depth=bert.config.num_hidden_layers)
    torch.testing.assert_close(ours[valid], theirs[valid], atol=atol, rtol=0)


def test_warm_start_with_pooling_copies_weights_exactly(minilm_path):
    model = tite_from_backbone(minilm_path, tite_preset("minilm-l6-3-all"))
    bert_state = BertModel.from_pretrained(minilm_path, add_pooling_layer=False).state_dict()
    mapped = bert_to_tite_state_dict(bert_state)
    ours = model.state_dict()
    for name, tensor in mapped.items():
        if name == "embeddings.position_embeddings.weight":
            tensor = tensor[:256]
        assert torch.equal(ours[name], tensor), name
    with torch.no_grad():
        vectors = model(input_ids=torch.randint(1000, 2000, (3, 200))).pooler_output
    assert vectors.shape == (3, 384) and torch.isfinite(vectors).all()


def test_pretraining_from_a_backbone_warm_starts_the_encoder_and_leaves_the_heads_fresh(minilm_path):
    # `pretrain tite --backbone`: the pre-training model's encoder is the warm start, layer for layer
    from dense_encoders.models.tite import TiteForPreTraining
    from dense_encoders.trainer.pretraining import PreTrainingSetup, build_model

    setup = PreTrainingSetup(architecture="tite", backbone=str(minilm_path), preset="minilm-l6-3-all")
    model = build_model(setup, vocab_size=30522)
    assert type(model) is TiteForPreTraining and model.config.name_or_path == str(minilm_path)
    bert_state = BertModel.from_pretrained(minilm_path, add_pooling_layer=False).state_dict()
    ours = model.tite.state_dict()
    for name, tensor in bert_to_tite_state_dict(bert_state).items():
        expected = tensor[:256] if name == "embeddings.position_embeddings.weight" else tensor
        assert torch.equal(ours[name], expected), name
    # the MAE head's decoder is the (copied) word table, tied
    assert model.get_output_embeddings().weight is model.tite.embeddings.word_embeddings.weight


def test_warm_start_rejects_mismatched_shapes_and_other_architectures(minilm_path, tmp_path):
    with pytest.raises(ValueError, match=r"hidden_sizes: TITE \{32\} vs backbone \{384\}"):
        tite_from_backbone(minilm_path, tite_preset("tiny-tite-2-late", vocab_size=30522))
    from transformers import RobertaConfig

    RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'roberta' checkpoint"):
        tite_from_backbone(tmp_path)


@pytest.mark.numerics
def test_without_pooling_the_token_states_come_at_the_inputs_length():
    """No pooling layer: ``last_hidden_state`` holds the token states at the input's length, as BERT's and the
    exported graph's (zeros past the longest text), equal to ``hidden_states[-1]``; real rows and the vector are
    those of the same texts without the extra padding."""
    model = tiny_model("tiny-tite-no-pooling", implementation="eager").double()
    trimmed = batch_of(random_texts(3, 9, seed=22))
    padded = {key: F.pad(value, (0, 16 - value.shape[1])) for key, value in trimmed.items()}
    with torch.no_grad():
        expected = model(**trimmed)
        output = model(**padded, output_hidden_states=True)
    valid = padded["attention_mask"].bool()
    assert output.last_hidden_state.shape[:2] == (3, 16)
    torch.testing.assert_close(output.last_hidden_state[valid],
                               expected.last_hidden_state[trimmed["attention_mask"].bool()], **FLOAT64_TOLERANCE)
    assert not output.last_hidden_state[~valid].any()
    torch.testing.assert_close(output.last_hidden_state, output.hidden_states[-1], **FLOAT64_TOLERANCE)
    torch.testing.assert_close(output.pooler_output, expected.pooler_output, **FLOAT64_TOLERANCE)
