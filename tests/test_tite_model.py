"""TiteModel against independent references: BertModel, a naive per-text TITE, batch invariance."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT64_TOLERANCE, float32_atol
from transformers import BertConfig, BertModel

from dense_encoders.checkpoints.tite_backbone import bert_to_tite_state_dict, tite_from_backbone
from dense_encoders.models.tite.modeling_tite import TiteModel
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


@pytest.mark.numerics
def test_no_pooling_absolute_positions_equals_bert_on_the_same_weights():
    bert_config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    bert = BertModel(bert_config).double().eval()  # float64: see conftest
    model = tiny_model("tiny-tite-no-pooling", position_embedding_type="absolute", type_vocab_size=2).double()
    missing, unexpected = model.load_state_dict(bert_to_tite_state_dict(bert.state_dict()), strict=False)
    assert not missing and not unexpected
    batch = batch_of(random_texts(4, 16))
    with torch.no_grad():
        ours = model(**batch).last_hidden_state
        theirs = bert(**batch).last_hidden_state
    valid = batch["attention_mask"].bool()
    assert ours.dtype == theirs.dtype == torch.float64
    torch.testing.assert_close(ours[valid], theirs[valid], **FLOAT64_TOLERANCE)


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
    config = model.config
    embeddings = model.embeddings
    states = embeddings.word_embeddings(ids)
    if embeddings.embedding_projection is not None:
        states = embeddings.embedding_projection(states)
    states = embeddings.LayerNorm(states)
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
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(width // heads)
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(-1, width)
        hidden = attention.dense(attended) + F.pad(queries_in, (0, width - queries_in.shape[-1]))
        if kernel is not None and location == "post":
            hidden = naive_pool(hidden, kernel, stride)
        hidden = attention.LayerNorm(hidden)
        states = layer.LayerNorm(layer.output(layer.activation(layer.intermediate(hidden))) + hidden)
    return states


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
               "cuda_graphs_tite.py", "sentence_transformers_tite.py", "modules.json", "1_Pooling"}
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
