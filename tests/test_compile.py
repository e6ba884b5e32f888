"""``torch.compile(model)`` of every family gives the eager model's outputs (issue 54 §4).

TITE's eager forward plans each batch on the host (``plan_tite``); dynamo cannot follow that read (67 graph breaks,
then its dynamic-shape guards failed at the second batch shape: ``sources must not be empty``). While compiled,
``TiteModel`` takes ``padded_tite``'s traceable path, as export does. Checked against the eager model's outputs on
batches of several sizes and padded lengths (right padding, texts of different lengths): the first batch compiles a
static graph, the second a dynamic one, the third reuses it.

* TITE under inductor, what a user calls (``torch.compile(model)``, default dynamic behaviour);
* every other pooling kind of the presets (pre, post, staggered, without pooling: first and mean) as one graph
  (``fullgraph=True``), through ``aot_eager`` (dynamo and AOTAutograd, the same traced graph inductor gets,
  without its C++ compile, minutes on 2 cores); hidden states asked of a compiled TITE come from the planned path;
* Condenser and the infused dual encoder as one graph each.
"""

from __future__ import annotations

import pytest
import torch
from conftest import float32_atol, tiny_condenser_config

from dense_encoders.models.condenser import CondenserModel
from dense_encoders.models.infused import InfusedDualEncoderConfig, InfusedDualEncoderModel
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.presets import tite_preset

VOCAB = 60
# (real lengths, padded length): batch sizes 2, 3, 5; texts of one token up to the longest a tiny TITE takes
SHAPES = [([5, 3], 7), ([12, 1, 9], 12), ([4, 16, 2, 7, 10], 16)]


def right_padded(lengths: list[int], width: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    attention_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    input_ids = torch.randint(1, VOCAB, (len(lengths), width), generator=generator) * attention_mask
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def assert_compiled_equal(model: torch.nn.Module, compiled, depth: int) -> None:
    """``compiled`` against the eager ``model`` on every shape of :data:`SHAPES`: the vectors, and the token states
    wherever the eager model has a row (a padded TITE's rows past the longest text are zeros)."""
    for seed, (lengths, width) in enumerate(SHAPES):
        batch = right_padded(lengths, width, seed)
        with torch.no_grad():
            eager, got = model(**batch), compiled(**batch)
        atol = float32_atol(eager.pooler_output, eager.last_hidden_state, depth=depth)
        torch.testing.assert_close(got.pooler_output, eager.pooler_output, atol=atol, rtol=0)
        rows = eager.last_hidden_state.shape[1]
        torch.testing.assert_close(got.last_hidden_state[:, :rows], eager.last_hidden_state, atol=atol, rtol=0)
        assert not got.last_hidden_state[:, rows:].any()


def tiny_tite(name: str, **overrides) -> TiteModel:
    torch.manual_seed(0)
    return TiteModel(tite_preset(name, vocab_size=VOCAB, **overrides)).eval()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test compiles from a cold cache (a shape another test compiled would hide a failing recompile)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.slow  # inductor's C++ compile of two graphs: about a minute on 2 busy cores with a cold cache
def test_tite_compiled_by_inductor_equals_eager():
    model = tiny_tite("tiny-tite-2-late")
    assert_compiled_equal(model, torch.compile(model), depth=model.config.num_hidden_layers)


@pytest.mark.parametrize("name, overrides", [
    ("tiny-tite-2-staggered", {}),
    ("tiny-tite-2-late-pre", {}),
    ("tiny-tite-2-late-post", {}),
    ("tiny-tite-no-pooling", {}),
    ("tiny-tite-no-pooling", {"output_pooling": "mean"}),
])
def test_tite_compiled_is_one_graph_equal_to_eager(name, overrides):
    model = tiny_tite(name, **overrides)
    assert_compiled_equal(model, torch.compile(model, backend="aot_eager", fullgraph=True),
                          depth=model.config.num_hidden_layers)


def test_compiled_tite_records_hidden_states_eagerly():
    """The traceable path gives no hidden states: a compiled TITE asked for them runs the planned forward outside
    the graph, and gives the eager model's."""
    model = tiny_tite("tiny-tite-2-late")
    compiled = torch.compile(model, backend="aot_eager")
    batch = right_padded([5, 3], 7, seed=0)
    with torch.no_grad():
        eager = model(**batch, output_hidden_states=True)
        got = compiled(**batch, output_hidden_states=True)
    assert len(got.hidden_states) == len(eager.hidden_states) == model.config.num_hidden_layers + 1
    for mine, theirs in zip(got.hidden_states, eager.hidden_states):
        torch.testing.assert_close(mine, theirs, atol=0, rtol=0)
    torch.testing.assert_close(got.pooler_output, eager.pooler_output, atol=0, rtol=0)


@pytest.mark.parametrize("family", ["condenser", "infused"])
def test_compiled_is_one_graph_equal_to_eager(family):
    torch.manual_seed(0)
    if family == "condenser":
        model = CondenserModel(tiny_condenser_config(vocab_size=VOCAB))
    else:
        model = InfusedDualEncoderModel(InfusedDualEncoderConfig(
            vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, num_copied_layers=1, num_new_layers=1))
    model.eval()
    assert_compiled_equal(model, torch.compile(model, backend="aot_eager", fullgraph=True),
                          depth=model.config.num_hidden_layers)
