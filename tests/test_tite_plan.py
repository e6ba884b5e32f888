"""TITE's batch plan (plan_tite.TitePlan), checked on CPU so that CI guards the GPU design.

* the plan equals a per-layer recomputation, sequence by sequence and window by window (Eq. 1);
* a pooled TITE layer dispatches at most 30 % more aten ops than a BertLayer on the same batch, and
  its Q/K/V projections are one matrix product (K/V one when intra pooling pools the queries);
* the layers read no device value on the host (Tensor.item / bool / int / tolist are patched).
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer

from dense_encoders.models.tite import cuda_graphs_tite as G
from dense_encoders.models.tite import modeling_tite as M
from dense_encoders.models.tite import plan_tite as PL
from dense_encoders.models.tite import rotary_tite as R
from dense_encoders.models.tite.modeling_tite import TiteModel
from dense_encoders.models.tite.pooling_tite import PLAN_PARTS, DeviceArrays
from dense_encoders.models.tite.presets import TINY_PRESETS, tite_preset

POOLING = sorted(name for name in TINY_PRESETS if name != "tiny-tite-no-pooling")


def tiny(name: str, **overrides) -> TiteModel:
    torch.manual_seed(0)
    config = tite_preset(name, vocab_size=60, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
    config._attn_implementation = "sdpa"
    return TiteModel(config).eval()


def ragged_batch(lengths: list[int], width: int | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    width = width or max(lengths)
    input_ids = torch.randint(1, 60, (len(lengths), width), generator=generator)
    attention_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask}


def naive_windows(lengths: list[int], kernel: int, stride: int) -> list[list[tuple[int, int]]]:
    """TITE Eq. 1 per sequence: windows start at 0, s, 2s, ... until one reaches the sequence end;
    ``(start, real tokens)`` of every window of every sequence."""
    windows = []
    for length in lengths:
        own, i = [], 0
        while length > 0:
            own.append((i * stride, max(0, min(kernel, length - i * stride))))
            if i * stride + kernel >= length:
                break
            i += 1
        windows.append(own)
    return windows


def naive_pooled_cu(cu: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """Cumulative pooled lengths, counted window by window."""
    counts = [len(own) for own in naive_windows(cu.diff().tolist(), kernel, stride)]
    return torch.tensor([0] + counts).cumsum(0).to(cu.dtype)


def naive_window_centres(cu: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """The centre of every window's full k-token span, start + (k - 1) / 2 (also for a partial last window)."""
    centres = [start + (kernel - 1) / 2 for own in naive_windows(cu.diff().tolist(), kernel, stride)
               for start, _ in own]
    return torch.tensor(centres, dtype=torch.float64)


# ---------------------------------------------------------------------------- plan = recomputation


@pytest.fixture
def every_plan_part(monkeypatch):
    """Plans with the Triton windows and tokens as well as the PyTorch bags (a CPU plan has bags only)."""
    monkeypatch.setattr(PL, "plan_parts", lambda device, implementation, backward: frozenset(PLAN_PARTS))


@pytest.fixture(params=[False, True], ids=["one-stage", "staged"])
def staged_plans(request, monkeypatch):
    """Plans in one stage (the CPU's default), or staged as on CUDA: the unpooled opening layers first, the rest
    when the forward reaches them."""
    if request.param:
        monkeypatch.setattr(M, "TitePlan", functools.partial(PL.TitePlan, staged=True))
    return request.param


@pytest.mark.parametrize("name", POOLING + ["tiny-tite-no-pooling"])
def test_plan_equals_the_per_layer_recomputation(name, every_plan_part, staged_plans):
    model = tiny(name)
    config = model.config
    lengths = [config.max_position_embeddings, 1, 7, 2, config.max_position_embeddings - 3, 5]
    batch = ragged_batch(lengths)
    plan = model.plan(batch["input_ids"], batch["attention_mask"])
    # the reference: cu_seqlens recomputed after every pooling step, window by window
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32)
    assert torch.equal(plan.input.cu_seqlens, cu)
    assert torch.equal(plan.gather, batch["attention_mask"].view(-1).nonzero().view(-1).to(plan.gather.dtype))
    positions = torch.cat([torch.arange(n) for n in lengths])
    assert torch.equal(plan.positions.long(), positions)
    for index, layer in enumerate(plan.layers):
        kernel, stride = config.kernel_sizes[index], config.strides[index]
        head_dim = config.hidden_sizes[index] // config.num_attention_heads[index]
        lengths_in = (cu[1:] - cu[:-1]).long()
        assert torch.equal(layer.key.cu_seqlens if layer.location != "pre" else plan.layers[index].query.cu_seqlens,
                           cu if layer.location != "pre" else naive_pooled_cu(cu, kernel, stride))
        if kernel is None:
            assert layer.location is None and layer.query is layer.key is layer.output
            out_cu = cu
        else:
            out_cu = naive_pooled_cu(cu, kernel, stride)
            assert torch.equal(layer.output.cu_seqlens, out_cu)
            assert layer.pool.total_in == int(cu[-1]) and layer.pool.total_out == int(out_cu[-1])
            assert layer.pool.max_out == int((out_cu[1:] - out_cu[:-1]).max())
            # window rows and counts against a loop over sequences and windows
            first, count = [], []
            for seq, n in enumerate(lengths_in.tolist()):
                for w in range(int(out_cu[seq + 1] - out_cu[seq])):
                    first.append(int(cu[seq]) + w * stride)
                    count.append(min(kernel, n - w * stride))
            assert layer.pool.window_first.tolist() == first and layer.pool.window_count.tolist() == count
            # the PyTorch path's bags list the same rows; the backward's tokens point at their windows
            bags = layer.pool.bag_indices.tolist()
            offsets = layer.pool.bag_offsets.tolist() + [len(bags)]
            assert [bags[offsets[w]:offsets[w + 1]] for w in range(len(first))] == \
                [list(range(f, f + c)) for f, c in zip(first, count)]
            token_window, token_windows = layer.pool.token_window.tolist(), layer.pool.token_windows.tolist()
            for w, (f, c) in enumerate(zip(first, count)):
                for row in range(f, f + c):
                    assert token_window[row] <= w < token_window[row] + token_windows[row]
        assert layer.key.max_length == int(lengths_in.max()) or layer.location == "pre"
        assert layer.query.max_length == int((layer.query.cu_seqlens.diff()).max())
        if layer.rotary_key_index is not None:  # what both rotary paths read: 2 * position (half units)
            key_cu = layer.key.cu_seqlens
            key_pos = torch.cat([torch.arange(int(n)) for n in key_cu.diff()]).double()
            query_pos = naive_window_centres(cu, kernel, stride) if layer.location == "intra" else key_pos
            assert torch.equal(layer.rotary_key_index.double() / 2, key_pos)
            assert torch.equal(layer.rotary_query_index.double() / 2, query_pos)
        if layer.rotary_key is not None:  # rotary rows = cos / sin at the recomputed positions
            for rows, pos in ((layer.rotary_key, key_pos), (layer.rotary_query, query_pos)):
                inv = 1.0 / config.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
                angles = pos[:, None] * inv[None, :]
                assert rows.shape == (pos.numel(), 2, 1, head_dim)
                torch.testing.assert_close(rows[:, 0, 0, : head_dim // 2].double(), angles.cos(), atol=2e-6, rtol=0)
                torch.testing.assert_close(rows[:, 1, 0, head_dim // 2 :].double(), angles.sin(), atol=2e-6, rtol=0)
        cu = out_cu
    if not plan.pools:
        assert plan.output is plan.input


def test_plan_errors_name_the_fix():
    model = tiny("tiny-tite-2-late")
    with pytest.raises(ValueError, match="no tokens"):
        model(**ragged_batch([3, 0, 2]))
    too_long = model.config.max_position_embeddings + 1
    with pytest.raises(ValueError, match="truncate"):
        model(**ragged_batch([too_long, 2]))


def test_left_padded_and_holed_masks_are_packed_like_right_padded_ones():
    model = tiny("tiny-tite-2-staggered")
    right = ragged_batch([9, 4, 16])
    left = {key: value.flip(-1) for key, value in right.items()}
    with torch.no_grad():
        expected = model(**right).pooler_output
        # the model reads tokens in mask order: a left-padded batch with reversed rows must give the
        # embeddings of the reversed texts, which a right-padded batch of those texts gives too
        reversed_right = {"input_ids": torch.zeros_like(right["input_ids"]), "attention_mask": right["attention_mask"]}
        for row, n in enumerate([9, 4, 16]):
            reversed_right["input_ids"][row, :n] = right["input_ids"][row, :n].flip(0)
        torch.testing.assert_close(model(**left).pooler_output, model(**reversed_right).pooler_output,
                                   atol=1e-5, rtol=0)
    assert expected.shape == (3, model.config.hidden_size)


def test_the_gather_of_right_padded_texts_is_the_flat_index_of_their_tokens():
    lengths = np.array([3, 1, 7, 7, 2])
    mask = np.arange(7)[None] < lengths[:, None]
    assert np.array_equal(PL.right_padded_gather(lengths, 7), np.flatnonzero(mask))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("order", ["right", "left", "holes", "full"])
def test_a_device_mask_is_read_as_its_host_copy(order):
    """A CUDA mask is read as its lengths and whether it is right-padded; any other mask as a whole: the plan's
    lengths and gather equal those of the same mask on the host."""
    mask = (torch.arange(8)[None] < torch.tensor([5, 8, 1, 3])[:, None]).long()
    mask = {"right": mask, "left": mask.flip(-1), "full": torch.ones_like(mask),
            "holes": mask * torch.tensor([1, 0, 1, 1, 1, 1, 1, 1])}[order]
    mask[2, 0] = 1  # no empty text
    lengths, gather = PL._lengths_from_mask(mask.cuda(), tuple(mask.shape))
    expected_lengths, expected_gather = PL._lengths_from_mask(mask, tuple(mask.shape))
    assert np.array_equal(lengths, expected_lengths)
    assert (gather is None) == (expected_gather is None) == (order == "full")
    assert gather is None or np.array_equal(gather, expected_gather)


# ---------------------------------------------------------------------------- op counts


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def count_layer_ops(module, *args, **kwargs) -> Counter:
    with torch.no_grad(), CountOps() as counter:
        module(*args, **kwargs)
    return counter.ops


@pytest.mark.parametrize("location", ["intra", "pre", "post"])
def test_a_pooled_layer_dispatches_at_most_30_percent_more_ops_than_a_bert_layer(location):
    model = tiny("tiny-tite-2-late", pooling_location=location)
    lengths = [16, 11, 5, 16]
    batch = ragged_batch(lengths)
    plan = model.plan(batch["input_ids"], batch["attention_mask"])
    layer_index = 1  # the first pooled layer: all lengths still differ, so attention is padded on CPU
    assert plan.layers[layer_index].pool is not None
    states = torch.randn(sum(lengths), 32)
    tite_ops = count_layer_ops(model.layers[layer_index], states, plan.layers[layer_index])

    bert_config = BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    bert_config._attn_implementation = "sdpa"
    bert_layer = BertLayer(bert_config).eval()
    mask = batch["attention_mask"].bool()[:, None, None, :]  # what BertModel hands its layers under sdpa
    bert_ops = count_layer_ops(bert_layer, torch.randn(len(lengths), 16, 32), attention_mask=mask)
    total_tite, total_bert = sum(tite_ops.values()), sum(bert_ops.values())
    assert total_tite <= 1.3 * total_bert, (total_tite, total_bert, tite_ops)
    # Q/K/V in one matrix product (intra: pooled Q alone, K and V in one), then the output, feed-forward in, out
    products = tite_ops["aten.addmm.default"] + tite_ops["aten.linear.default"] + tite_ops["aten.mm.default"]
    assert products == (5 if location == "intra" else 4), tite_ops
    # and nothing that recomputes indices per layer on the device
    for op in ("aten.cumsum.default", "aten.arange.start", "aten.repeat_interleave.Tensor", "aten.nonzero.default",
               "aten._local_scalar_dense.default"):
        assert op not in tite_ops, op


# ---------------------------------------------------------------------------- fused projections


def float64_attention(location: str = "intra"):
    model = tiny("tiny-tite-2-late", pooling_location=location).double()
    return model, model.layers[1].attention


def separate(attention, names, states):
    return tuple(getattr(attention, name)(states) for name in names)


@pytest.mark.numerics
@pytest.mark.parametrize("names", [("query", "key", "value"), ("key", "value")])
def test_fused_projections_equal_the_separate_linears_forward_and_backward(names):
    """One GEMM over concatenated weights = each nn.Linear on its own, values and every gradient (float64)."""
    from conftest import FLOAT64_TOLERANCE

    _, attention = float64_attention()
    states = torch.randn(23, 32, dtype=torch.float64, requires_grad=True)
    upstream = [torch.randn(23, 32, dtype=torch.float64) for _ in names]
    fused = attention._project(names, states)
    assert all(f.grad_fn is not None for f in fused)
    torch.autograd.backward(fused, upstream)
    fused_grads = [states.grad.clone()] + [getattr(attention, n).weight.grad.clone() for n in names] + [
        getattr(attention, n).bias.grad.clone() for n in names]
    states.grad = None
    attention.zero_grad()
    reference = separate(attention, names, states)
    torch.autograd.backward(reference, upstream)
    reference_grads = [states.grad] + [getattr(attention, n).weight.grad for n in names] + [
        getattr(attention, n).bias.grad for n in names]
    for got, expected in zip(fused, reference):
        torch.testing.assert_close(got, expected, **FLOAT64_TOLERANCE)
    for got, expected in zip(fused_grads, reference_grads):
        torch.testing.assert_close(got, expected, **FLOAT64_TOLERANCE)


@pytest.mark.numerics
def test_every_change_of_the_weights_is_seen_also_through_data():
    """An edit through ``.data`` leaves no trace on the parameter (no version bump): PEFT's merge_and_unload makes it
    so, as does load_state_dict. After a no-grad forward, such an edit must change the projections (before: the
    concatenated weights were cached, keyed on the version, and served the old weights: off by the whole edit)."""
    from conftest import FLOAT64_TOLERANCE

    model, attention = float64_attention()
    names = ("query", "key", "value")
    states = torch.randn(9, 32, dtype=torch.float64)
    with torch.no_grad():
        attention._project(names, states)
        attention.key.weight.data += 0.25 * torch.randn(attention.key.weight.shape, dtype=torch.float64)  # merged
        got, expected = attention._project(names, states), separate(attention, names, states)
        model.load_state_dict({k: v + 1.0 for k, v in model.state_dict().items()})
        again, reloaded = attention._project(names, states), separate(attention, names, states)
    for pair in (*zip(got, expected), *zip(again, reloaded)):
        torch.testing.assert_close(*pair, **FLOAT64_TOLERANCE)


def test_a_merged_edit_changes_a_tite_models_vectors():
    """The model as a user holds it: a no-grad forward, then a weight edit through ``.data`` (a same-process LoRA
    merge), then the vectors of a fresh model loaded with the edited weights."""
    model = tiny("tiny-tite-2-late").double().eval()
    batch = ragged_batch([16, 9, 4])
    with torch.no_grad():
        before = model(**batch).pooler_output
        generator = torch.Generator().manual_seed(0)
        for layer in model.layers:
            weight = layer.attention.query.weight
            weight.data += 0.05 * torch.randn(weight.shape, generator=generator, dtype=weight.dtype)
        edited = model(**batch).pooler_output
        fresh = TiteModel(model.config).double().eval()
        fresh.load_state_dict(model.state_dict())
        expected = fresh(**batch).pooler_output
    assert (edited - before).abs().max() > 1e-3
    torch.testing.assert_close(edited, expected, atol=1e-12, rtol=0)


def test_hooked_or_replaced_projections_run_one_by_one():
    """Adapters and hooks on a projection (what PEFT / quantisation put there) are never bypassed."""
    _, attention = float64_attention()
    names = ("query", "key", "value")
    states = torch.randn(5, 32, dtype=torch.float64)
    with torch.no_grad():
        plain = separate(attention, names, states)
        handle = attention.key.register_forward_hook(lambda module, args, output: output * 2)
        hooked = attention._project(names, states)
        handle.remove()

        class Adapter(torch.nn.Linear):
            def forward(self, x):
                return super().forward(x) + 1

        adapter = Adapter(32, 32, dtype=torch.float64)
        adapter.load_state_dict(attention.value.state_dict())
        attention.value = adapter
        adapted = attention._project(names, states)
    # run one by one: bit-equal to the separate linears with the hook / adapter applied
    assert torch.equal(hooked[1], 2 * plain[1]) and torch.equal(hooked[0], plain[0])
    assert torch.equal(adapted[2], plain[2] + 1) and torch.equal(adapted[1], plain[1])


# ---------------------------------------------------------------------------- no host reads in the layers


class HostReadError(AssertionError):
    pass


@pytest.fixture
def forbid_host_reads_in_layers(monkeypatch):
    """Patch the Tensor methods that read a device value on the host; armed only inside the layers."""
    armed = {"on": False}

    def guard(name):
        original = getattr(torch.Tensor, name)

        def patched(self, *args, **kwargs):
            if armed["on"]:
                raise HostReadError(f"Tensor.{name} called inside a TITE layer")
            return original(self, *args, **kwargs)

        return patched

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, guard(name))

    def arm(model):
        first, last = model.layers[0], model.layers[-1]
        first.register_forward_pre_hook(lambda *_: armed.update(on=True))
        last.register_forward_hook(lambda *_: armed.update(on=False))

    return arm


@pytest.mark.parametrize("name", POOLING)
def test_layers_read_no_device_value_on_the_host(name, forbid_host_reads_in_layers):
    model = tiny(name)
    forbid_host_reads_in_layers(model)
    lengths = [model.config.max_position_embeddings, 3, 1, 8]
    with torch.no_grad():
        vectors = model(**ragged_batch(lengths)).pooler_output
    assert vectors.shape == (4, model.config.hidden_size) and torch.isfinite(vectors).all()
    # training too (autograd, dropout): the backward pass is outside the guard, the forward inside
    model.train()
    model(**ragged_batch(lengths)).pooler_output.sum().backward()


def test_the_host_read_guard_catches_a_read(forbid_host_reads_in_layers, monkeypatch):
    """The guard above can fail: a layer that reads a length on the host is caught."""
    model = tiny("tiny-tite-2-late")
    original = M.TiteAttention.forward

    def reading_forward(self, states, plan):
        int(plan.key.cu_seqlens[-1])  # a host read of a device value inside a layer
        return original(self, states, plan)

    monkeypatch.setattr(M.TiteAttention, "forward", reading_forward)
    forbid_host_reads_in_layers(model)
    with pytest.raises(HostReadError), torch.no_grad():
        model(**ragged_batch([16, 3]))


# ---------------------------------------------------------------------------- attention choice


def test_sdpa_on_cpu_plans_padded_attention_and_cuda_half_plans_varlen(monkeypatch):
    model = tiny("tiny-tite-2-late")
    batch = ragged_batch([16, 5])
    assert not model.plan(**batch).varlen  # CPU: padded sdpa
    assert M.varlen_attention_available(torch.device("cpu"), torch.bfloat16) is False
    monkeypatch.setattr(M, "varlen_attn", object())  # as on a torch with varlen attention
    monkeypatch.setattr(M, "_flash_capable", lambda index: True)  # as on an sm80+ GPU
    cuda = torch.device("cuda", 0)
    assert M.varlen_attention_available(cuda, torch.bfloat16)
    assert not M.varlen_attention_available(cuda, torch.float32)  # flash kernels: half only
    monkeypatch.setattr(M, "_flash_capable", lambda index: False)  # e.g. a T4 (sm75)
    assert not M.varlen_attention_available(cuda, torch.bfloat16)
    monkeypatch.setattr(M, "_flash_capable", lambda index: True)
    # attention dropout needs the direct operator: the public varlen_attn takes none
    monkeypatch.setattr(M, "_flash_attention_forward", object())
    assert M.varlen_attention_available(cuda, torch.bfloat16, dropout=0.1)
    monkeypatch.setattr(M, "_flash_attention_forward", None)
    assert M.varlen_attention_available(cuda, torch.bfloat16, dropout=0.0)
    assert not M.varlen_attention_available(cuda, torch.bfloat16, dropout=0.1)
    monkeypatch.setattr(M, "varlen_attn", None)
    assert not M.varlen_attention_available(cuda, torch.bfloat16)


def test_plan_arrays_move_in_one_transfer(monkeypatch):
    """Every index of a plan comes from ONE host-to-device copy (here: one call of DeviceArrays.transfer
    for the whole forward), whatever the number of layers. (A staged plan, CUDA's default, makes two: see
    test_a_staged_plan_plans_the_pooled_layers_after_launching_the_opening_ones.)"""
    calls = []
    original = DeviceArrays.transfer

    def counted(self, device, into=None):
        calls.append(len(self._arrays))
        return original(self, device, into)

    monkeypatch.setattr(DeviceArrays, "transfer", counted)
    model = tiny("tiny-tite-3-staggered")
    with torch.no_grad():
        model(**ragged_batch([27, 4, 9]))
    assert len(calls) == 1 and calls[0] > 2 * model.config.num_hidden_layers // 2


def test_plans_build_only_what_the_forward_reads(monkeypatch):
    """CPU: PyTorch bags only; CUDA with Triton: the kernels' windows, plus tokens when a backward may follow."""
    from dense_encoders.models.tite import pooling_tite as P

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert P.plan_parts("cpu", "auto", True) == {"bags"}
    monkeypatch.setattr(P, "triton_available", lambda: True)
    assert P.plan_parts("cuda", "auto", False) == {"windows"}
    assert P.plan_parts("cuda", "auto", True) == {"windows", "tokens"}
    assert P.plan_parts("cuda", "torch", True) == {"bags"}
    assert P.plan_parts("cpu", "triton", True) == {"bags"}  # falls back to PyTorch without the interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert P.plan_parts("cpu", "triton", False) == {"windows"}
    monkeypatch.setattr(P, "triton_available", lambda: False)
    assert P.plan_parts("cuda", "auto", True) == {"bags"}
    with pytest.raises(AttributeError, match="built without 'window_first'"):
        model = tiny("tiny-tite-2-late")
        model.plan(**ragged_batch([16, 3])).layers[1].pool.window_first


@pytest.mark.parametrize("staged", [False, True], ids=["one-stage", "staged"])
def test_static_capacity_plans_have_the_same_shapes_for_every_batch_of_a_bucket(every_plan_part, staged):
    """CUDA-graph plans: two different batches of one bucket give arrays of identical sizes (so the second
    is copied into the first one's buffer, or buffers when staged: one per graph), real entries equal to the
    ordinary plan's, and host sizes that are upper bounds depending on the bucket alone."""
    model = tiny("tiny-tite-2-late")
    config = model.config
    capacity = (8, 64, 16)
    batches = [ragged_batch([16, 3, 9, 1]), ragged_batch([5, 16, 16, 2, 2, 7], seed=1)]
    plans = []
    for batch in batches:
        into = plans[0] if plans else None
        plans.append(PL.TitePlan(config, batch["attention_mask"], tuple(batch["input_ids"].shape), "cpu", True,
                                torch.bfloat16, capacity, into=into, staged=staged))
        plans[-1].layers  # complete (the captured plan is, before any replay plans into it)
    first, second = plans
    assert second._arrays._flat is first._arrays._flat  # one static buffer, rewritten
    assert first.staged == staged and (not staged or second._later._flat is first._later._flat)
    for a, b in zip(first.layers, second.layers):
        assert (a.key.rows, a.key.max_length, a.query.rows, a.query.max_length) == \
            (b.key.rows, b.key.max_length, b.query.rows, b.query.max_length)
        if a.pool is not None:
            assert ((a.pool.total_in, a.pool.total_out, a.pool.max_out)
                    == (b.pool.total_in, b.pool.total_out, b.pool.max_out))
        if a.key.max_length == 1:  # attention is the value projection: query rows must be the key rows
            assert a.query.rows == a.key.rows
    # the buffer holds the second batch: its real entries equal the ordinary plan's
    ordinary = model.plan(**batches[1])
    lengths = [5, 16, 16, 2, 2, 7]
    for real, static in zip(ordinary.layers, second.layers):
        n = len(lengths) + 1
        assert torch.equal(static.key.cu_seqlens[:n], real.key.cu_seqlens)
        assert (static.key.cu_seqlens[n:] == real.key.cu_seqlens[-1]).all()  # empty padding sequences
        assert static.key.max_length >= real.key.max_length and static.key.rows >= real.key.rows
        if real.pool is not None:
            rows = real.pool.total_out
            assert torch.equal(static.pool.window_first[:rows], real.pool.window_first)
            assert torch.equal(static.pool.window_count[:rows], real.pool.window_count)
            assert (static.pool.window_count[rows:] == 0).all()  # padding windows are empty: zero rows
            assert static.pool.total_out >= real.pool.total_out
    assert torch.equal(second.gather[: sum(lengths)], ordinary.gather.to(second.gather.dtype))
    # a batch beyond the bucket is refused instead of silently truncated
    with pytest.raises(ValueError, match="does not fit"):
        too_many = ragged_batch([16] * 5)
        PL.TitePlan(config, too_many["attention_mask"], (5, 16), "cpu", True, torch.bfloat16, capacity)


def test_buckets_round_up_by_at_most_an_eighth():
    for value in (1, 7, 8, 9, 100, 256, 257, 1000, 20401, 81920):
        bucket = G.capacity_bucket(value, 8)
        assert bucket >= value and (bucket - max(value, 8)) <= max(value, 8) / 8 + 1


def test_rotary_tables_are_cached_per_device_and_dtype():
    R._TABLES.clear()
    first = R.rotary_table(8, 10000.0, 100, torch.device("cpu"), torch.float32)
    assert R.rotary_table(8, 10000.0, 50, torch.device("cpu"), torch.float32) is first
    assert R.rotary_table(8, 10000.0, 50, torch.device("cpu"), torch.float64) is not first
    positions = torch.arange(first.shape[0], dtype=torch.float64) / 2
    inv = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    torch.testing.assert_close(first[:, 0, 0, :4].double(), (positions[:, None] * inv).cos(), atol=1e-5, rtol=0)
    assert math.isclose(float(first[3, 0, 0, 0]), math.cos(1.5), abs_tol=1e-6)


def pairwise_rotation(x: torch.Tensor, index: torch.Tensor, theta: float) -> torch.Tensor:
    """RoFormer's rotation of pairs (m, m + d/2) by (index / 2) * theta^(-2m/d), written out in float64."""
    half = x.shape[-1] // 2
    inv = 1.0 / theta ** (torch.arange(0, 2 * half, 2, dtype=torch.float64) / (2 * half))
    angle = (index.double() / 2)[:, None, None] * inv
    x1, x2 = x[..., :half].double(), x[..., half:].double()
    return torch.cat((x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()), -1)


def test_table_rotary_is_the_pairwise_rotation():
    x = torch.randn(5, 3, 8, dtype=torch.float64)
    index = torch.tensor([0, 3, 4, 9, 17], dtype=torch.int32)
    rows = R.rotary_table(8, 10000.0, 20, torch.device("cpu"), torch.float64).index_select(0, index)
    torch.testing.assert_close(R.apply_rotary_rows(x, rows), pairwise_rotation(x, index, 10000.0), atol=1e-12, rtol=0)


@pytest.mark.parametrize("heads,head_dim", [(3, 8), (12, 64), (5, 6)])
def test_triton_rotary_kernel_equals_the_rotation_forward_and_backward(monkeypatch, heads, head_dim):
    """The fused kernel (Triton's CPU interpreter here; compiled on CUDA) against the float64 rotation:
    queries and keys of different row counts and positions in one launch, forward and backward."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(heads)
    query = torch.randn(37, heads, head_dim, generator=generator).requires_grad_()
    key = torch.randn(300, heads, head_dim, generator=generator).requires_grad_()
    query_index = torch.randint(0, 1024, (37,), generator=generator, dtype=torch.int32)
    key_index = torch.randint(0, 1024, (300,), generator=generator, dtype=torch.int32)
    # fp32 angles up to 512 rad: |error| <= |angle| * 2^-23 per factor, times |x| <= ~5
    tolerance = dict(atol=512 * 2**-23 * 5 * 4, rtol=0)
    out_q, out_k = R.apply_rotary(query, key, query_index, key_index, 10000.0)
    assert type(out_q.grad_fn).__name__ == "TritonRotaryBackward"
    torch.testing.assert_close(out_q.double(), pairwise_rotation(query.detach(), query_index, 10000.0), **tolerance)
    torch.testing.assert_close(out_k.double(), pairwise_rotation(key.detach(), key_index, 10000.0), **tolerance)
    upstream_q, upstream_k = (torch.randn(out_q.shape, generator=generator),
                              torch.randn(out_k.shape, generator=generator))
    torch.autograd.backward((out_q, out_k), (upstream_q, upstream_k))
    # the rotation is orthogonal: its gradient is the inverse rotation of the upstream gradient
    torch.testing.assert_close(query.grad.double(), pairwise_rotation(upstream_q, -query_index, 10000.0), **tolerance)
    torch.testing.assert_close(key.grad.double(), pairwise_rotation(upstream_k, -key_index, 10000.0), **tolerance)
    with torch.no_grad():  # inference skips the autograd node, same numbers
        again_q, again_k = R.apply_rotary(query, key, query_index, key_index, 10000.0)
    assert again_q.grad_fn is None and torch.equal(again_q, out_q.detach()) and torch.equal(again_k, out_k.detach())


def reference_packed_attention(query, key, value, query_layout, key_layout, dropout, scale):
    """Softmax attention per sequence of packed rows (the varlen kernel's contract); rows of no sequence: 0."""
    out = torch.zeros_like(query)
    cu_q, cu_k = query_layout.cu_seqlens.tolist(), key_layout.cu_seqlens.tolist()
    for i in range(len(cu_q) - 1):
        q, k, v = query[cu_q[i]:cu_q[i + 1]], key[cu_k[i]:cu_k[i + 1]], value[cu_k[i]:cu_k[i + 1]]
        if len(q):
            scores = torch.einsum("qhd,khd->hqk", q, k) * scale
            out[cu_q[i]:cu_q[i + 1]] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    return out


@pytest.mark.parametrize("name", ["tiny-tite-2-late", "tiny-tite-3-staggered", "tiny-tite-2-late-pre",
                                  "tiny-tite-2-late-post", "tiny-tite-2-late-upscale"])
def test_layers_on_static_capacity_shapes_equal_the_ordinary_forward(name, monkeypatch):
    """What a CUDA graph replays, run eagerly on CPU: the varlen path (a per-sequence reference attention),
    the Triton kernels (interpreter), every layer on the bucket's static row counts. The first rows of the
    output are the batch's vectors, equal to the ordinary forward's."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model = tiny(name, pooling_implementation="triton")
    n = model.config.max_position_embeddings
    batch = ragged_batch([n, 3, 9, 1, n - 2])
    with torch.no_grad():
        expected = model(**batch).pooler_output  # padded sdpa, torch rotary table
        monkeypatch.setattr(M, "varlen_attention_available", lambda device, dtype, dropout=0.0: True)
        monkeypatch.setattr(M, "packed_flash_attention", reference_packed_attention)
        monkeypatch.setattr(PL, "fused_rotary_available", lambda device, dtype: True)
        capacity = (8, G.capacity_bucket(int(batch["attention_mask"].sum()), 8) + 16, n)
        plan = PL.TitePlan(model.config, batch["attention_mask"], tuple(batch["input_ids"].shape), "cpu", True,
                          torch.float32, capacity)
        tokens = int(batch["attention_mask"].sum())
        states = model.embeddings(batch["input_ids"].reshape(-1).index_select(0, plan.gather[:tokens]),
                                  plan.positions[:tokens], None)
        hidden = torch.full((capacity[1], states.shape[1]), 7.0)  # rows of no sequence hold stale values
        hidden[:tokens] = states
        for layer, layer_plan in zip(model.layers, plan.layers):
            assert layer_plan.rotary_query is None  # the fused kernel rotates from indices
            hidden = layer(hidden, layer_plan)
    assert hidden.shape[0] == plan.layers[-1].output.rows >= 5
    # fp32, O(1) activations through <= 6 post-norm layers: agreement to a few 1e-6 expected
    torch.testing.assert_close(hidden[:5], expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("name", ["tiny-tite-2-late", "tiny-tite-2-late-upscale", "tiny-tite-3-staggered"])
def test_a_staged_plan_plans_the_pooled_layers_after_launching_the_opening_ones(name, monkeypatch):
    """On CUDA a plan is staged: the opening unpooled layers need only the input's layout, so they are launched
    before the pooled layers are planned and transferred (host work while the device runs them). The vectors are
    the one-stage plan's, bit for bit: the same arrays reach the same kernels."""
    model = tiny(name)
    opening = next(index for index, kernel in enumerate(model.config.kernel_sizes) if kernel is not None)
    batch = ragged_batch([model.config.max_position_embeddings, 3, 9, 1, 6])
    with torch.no_grad():
        one_stage = model(**batch).pooler_output
    events = []
    original = DeviceArrays.transfer

    def transfer(self, device, into=None):
        events.append("transfer")
        return original(self, device, into)

    monkeypatch.setattr(DeviceArrays, "transfer", transfer)
    for index, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(lambda module, args, index=index: events.append(f"layer {index}"))
    monkeypatch.setattr(M, "TitePlan", functools.partial(PL.TitePlan, staged=True))
    with torch.no_grad():
        staged = model(**batch).pooler_output
    opening_layers = [f"layer {index}" for index in range(opening)]
    rest = [f"layer {index}" for index in range(opening, model.config.num_hidden_layers)]
    assert events == ["transfer", *opening_layers, "transfer", *rest]
    assert torch.equal(staged, one_stage)


def test_only_a_cuda_plan_without_static_shapes_is_staged_by_default():
    model = tiny("tiny-tite-2-late")
    batch = ragged_batch([16, 3, 9])
    config, mask, shape = model.config, batch["attention_mask"], tuple(batch["input_ids"].shape)
    assert len(PL.TitePlan(config, mask, shape, "cpu", False)._layer_plans) == config.num_hidden_layers
    staged = PL.TitePlan(config, mask, shape, "cpu", False, staged=True)
    assert len(staged._layer_plans) == 1  # the opening layer only, until a pooled layer is asked for
    assert len(staged.layers) == config.num_hidden_layers
    capacity = G.static_capacity(mask.sum(-1), config.max_position_embeddings)
    assert len(PL.TitePlan(config, mask, shape, "cpu", True, capacity=capacity)._layer_plans) == \
        config.num_hidden_layers  # static shapes are staged only when asked (CudaGraphs asks)
    uncompleted = PL.TitePlan(config, mask, shape, "cpu", True, capacity=capacity, staged=True)
    replay = PL.TitePlan(config, mask, shape, "cpu", True, capacity=capacity, into=uncompleted, staged=True)
    with pytest.raises(RuntimeError, match="never planned"):
        replay.layers  # its second transfer would have no captured buffer to go into
    flat = tiny("tiny-tite-no-pooling")
    assert len(PL.TitePlan(flat.config, mask[:, :16], (3, 16), "cpu", False, staged=True)._layer_plans) == 2


@pytest.mark.numerics
def test_a_lora_merge_in_the_same_process_equals_the_saved_adapter(tmp_path, tok):
    """PEFT's merge_and_unload edits the base weights through ``.data``. After a no-grad forward of the base model (as
    an evaluation before fine-tuning runs it), the merged TITE must give the adapter's vectors (before: the old
    weights, off by the whole adapter), as loading the saved adapter onto a fresh copy does."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    folder = tmp_path / "tite"
    TiteModel(tite_preset("tiny-tite-2-late", vocab_size=len(tok))).double().save_pretrained(folder)
    tok.save_pretrained(folder)
    batch = dict(tok(["dense retrieval", "a longer text that the encoder pools down to one vector"], padding=True,
                     return_tensors="pt", return_token_type_ids=False))
    base = TiteModel.from_pretrained(folder).eval()
    with torch.no_grad():
        untouched = base(**batch).pooler_output
    adapted = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["query", "key", "value"],
                                                        init_lora_weights=False))  # random A and B: not a no-op
    adapted.save_pretrained(tmp_path / "adapter")
    merged = adapted.merge_and_unload().eval()
    fresh = peft.PeftModel.from_pretrained(TiteModel.from_pretrained(folder), tmp_path / "adapter").eval()
    with torch.no_grad():
        got, expected = merged(**batch).pooler_output, fresh(**batch).pooler_output
    assert (expected - untouched).abs().max() > 1e-2  # the adapter changes the vectors
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)
