"""TITE (Schlatt et al., SIGIR 2025): transformer layers that pool a text down to one vector.

Read top to bottom: the batch plan (with rotary positions), embeddings, attention (with pre /
intra / post pooling), the layer, the pre-trained base class and :class:`TiteModel`.

Sequences are unpadded ONCE into a packed ``(tokens, width)`` tensor and stay packed through every
layer. Everything the pooling schedule determines for a batch (each layer's ``cu_seqlens`` and
max lengths, pooling windows, rotary rows, padding indices) is computed once per forward on the
host from the attention mask and moved to the device in one transfer (:class:`TitePlan`), so the
layers never wait for the device. Attention runs on the packed rows directly (PyTorch's varlen
flash attention on CUDA in fp16/bf16, or FlashAttention-2 varlen) or regroups them per sequence
inside the call (padded eager / sdpa: CPU, fp32).

Shipped as remote code next to every checkpoint: imports ``torch`` and ``transformers``
absolutely, its sibling files relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import ModelOutput, logging

from .configuration_tite import TiteConfig
from .pooling_tite import DeviceArrays, PoolPlan, _segment_positions, plan_parts, pool_planned
from .rotary_tite import apply_rotary, fused_rotary_available, rotary_table
from .sentence_transformers_tite import SentenceTransformersFilesMixin, StrictLoadingMixin

try:  # PyTorch's own varlen flash attention (CUDA, fp16/bf16; torch >= 2.9): no flash-attn package needed
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - depends on the torch version
    varlen_attn = None
# The operator behind varlen_attn (and sdpa's nested-tensor path): called directly it costs less host
# time per call and takes attention dropout, which varlen_attn does not expose. Private, so every use
# falls back to varlen_attn when it is missing.
_flash_attention_forward = getattr(torch.ops.aten, "_flash_attention_forward", None)

logger = logging.get_logger(__name__)

# dense-encoders release that wrote this file (checked by dense_encoders.hub.check_remote_code)
DENSE_ENCODERS_CODE_VERSION = "0.1.0"


@functools.cache
def _flash_capable(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 0)  # FlashAttention-2 needs sm80+


def varlen_attention_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether PyTorch's varlen flash attention can run on ``device`` in ``dtype`` (CUDA sm80+, fp16/bf16)."""
    if (varlen_attn is None and _flash_attention_forward is None) or device.type != "cuda":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return dtype in (torch.float16, torch.bfloat16) and _flash_capable(index)


def varlen_attention_runs(device: torch.device, dtype: torch.dtype, dropout: float) -> bool:
    """Varlen flash attention for tensors of this device and dtype (attention dropout needs the direct
    operator): what a plan prepares for and what a layer then runs."""
    if dropout > 0.0 and _flash_attention_forward is None:
        return False
    return varlen_attention_supported(device, dtype)


def varlen_attention_applies(query: torch.Tensor, dropout: float) -> bool:
    """:func:`varlen_attention_runs` for these packed queries."""
    return varlen_attention_runs(query.device, query.dtype, dropout)


def packed_flash_attention(query, key, value, query_layout, key_layout, dropout: float, scale: float):
    """Softmax attention of packed ``(rows, heads, head_dim)`` rows per sequence, with different query
    and key lengths (intra pooling), by PyTorch's FlashAttention-2 varlen kernel: no padding at all."""
    if _flash_attention_forward is not None:
        return _flash_attention_forward(
            query, key, value, query_layout.cu_seqlens, key_layout.cu_seqlens,
            query_layout.max_length, key_layout.max_length, dropout, False, False, scale=scale,
        )[0]
    return varlen_attn(
        query, key, value, query_layout.cu_seqlens, key_layout.cu_seqlens,
        query_layout.max_length, key_layout.max_length,
    )


# --------------------------------------------------------------------------------------------
# The batch plan: every index the pooling schedule determines, computed once on the host
# --------------------------------------------------------------------------------------------


class SequenceLayout:
    """Packed rows of one set of sequence lengths (host ``lengths``; device indices after transfer).

    ``cu_seqlens`` (int32) and ``max_length`` serve varlen attention; ``pad`` / ``unpad`` move
    rows to and from a ``(batch, max_length)`` grid for padded attention (a free ``view`` when
    every sequence has the same length); ``rotary_index`` is ``2 * position`` of every row, its
    row in the half-position rotary table.
    """

    def __init__(self, lengths: np.ndarray, arrays: DeviceArrays, padded: bool,
                 capacity: tuple[int, int] | None = None):
        """``capacity``: ``(rows, longest)`` upper bounds for static shapes (CUDA graphs); rows past
        the last sequence belong to none and are never read by a real row."""
        self.lengths = lengths
        self.batch_size = int(lengths.size)
        self.rows = int(lengths.sum())
        self.max_length = int(lengths.max()) if lengths.size else 0
        self.uniform = self.batch_size > 0 and int(lengths.min()) == self.max_length
        self.positions_host = _segment_positions(lengths)
        self._arrays = arrays
        self._cu = arrays.add(np.concatenate(([0], np.cumsum(lengths))))
        if capacity is not None:
            self.rows, self.max_length = capacity
            self.uniform = False
        self._rotary = arrays.add(2 * self.positions_host, capacity and self.rows)
        self._pad = None
        if padded:
            self._register_padding(arrays)

    def _register_padding(self, arrays: DeviceArrays):
        if self.uniform:
            self._pad = ()
            return
        sequence = np.repeat(np.arange(self.batch_size), self.lengths)
        unpad = sequence * self.max_length + self.positions_host  # grid cell of every row
        gather = np.full(self.batch_size * self.max_length, self.rows, dtype=np.int64)  # the zero row
        gather[unpad] = np.arange(self.rows)
        self._pad = (arrays.add(gather), arrays.add(unpad))

    @property
    def cu_seqlens(self) -> torch.Tensor:
        return self._arrays[self._cu]

    @property
    def rotary_index(self) -> torch.Tensor:
        return self._arrays[self._rotary]

    def ensure_padding(self, device: torch.device) -> None:
        """Register and transfer the padding indices when the plan did not foresee padded attention."""
        if self._pad is None:
            arrays = DeviceArrays()
            self._register_padding(arrays)
            arrays.transfer(device)
            self._arrays_pad = arrays
        if self._pad and not hasattr(self, "valid"):
            arrays = getattr(self, "_arrays_pad", self._arrays)
            self._gather, self._unpad = arrays[self._pad[0]], arrays[self._pad[1]]
            self.valid = (self._gather < self.rows).view(self.batch_size, 1, 1, self.max_length)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``(rows, ...)`` -> ``(batch, max_length, ...)``, zeros at padded positions."""
        shape = (self.batch_size, self.max_length, *packed.shape[1:])
        if self.uniform:
            return packed.view(shape)
        with_zero_row = F.pad(packed, (0, 0) * (packed.dim() - 1) + (0, 1))
        return with_zero_row.index_select(0, self._gather).view(shape)

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`pad`."""
        flat = padded.reshape(self.batch_size * self.max_length, *padded.shape[2:])
        return flat if self.uniform else flat.index_select(0, self._unpad)

    def key_mask(self) -> torch.Tensor | None:
        """Boolean ``(batch, 1, 1, max_length)`` mask of real keys; None when nothing is padded."""
        return None if self.uniform else self.valid


@dataclass
class LayerPlan:
    """What one layer reads from the plan: its pooling step and query / key / output layouts."""

    location: str | None  # "pre" | "intra" | "post" | None (no pooling in this layer)
    pool: PoolPlan | None
    query: SequenceLayout
    key: SequenceLayout
    output: SequenceLayout
    rotary_query_index: torch.Tensor | None = None  # 2 * position of every query row (half units)
    rotary_key_index: torch.Tensor | None = None
    rotary_query: torch.Tensor | None = None  # gathered table rows (query rows, 2, 1, head_dim), or None
    rotary_key: torch.Tensor | None = None  # when the fused Triton kernel rotates from the indices
    varlen: bool = False  # attention on packed rows with torch's varlen flash kernel


class TitePlan:
    """One batch's plan (TITE's pooling schedule, Schlatt et al. Sec. 3.1, applied to real lengths).

    Built from the attention mask on the host (one device read when the mask lives on the GPU, none
    when it is a CPU tensor): every layer's ``cu_seqlens`` and max lengths, the pooling windows,
    the rows of the rotary table, and the padding indices where attention is padded. All index
    arrays move to the device in one transfer; the layers then read no device value on the host.
    """

    def __init__(self, config: TiteConfig, attention_mask, shape, device, varlen: bool, dtype=torch.float32,
                 capacity: tuple[int, int, int] | None = None, into: TitePlan | None = None):
        """``capacity`` ``(sequences, tokens, longest text)``: static shapes for a CUDA graph (varlen
        attention and Triton kernels only): the batch is padded with empty sequences, every layer's rows with rows
        of no sequence, and host sizes are upper bounds that depend on the capacity alone. ``into``:
        a plan of the same capacity whose device buffer the arrays are copied into (graph replay)."""
        batch, length = shape
        if attention_mask is None:
            lengths = np.full(batch, length, dtype=np.int64)
            gather = None
        else:
            mask = attention_mask.detach().to("cpu").numpy() != 0  # the forward's one host read
            lengths = mask.sum(1).astype(np.int64)
            gather = None if bool(mask.all()) else np.flatnonzero(mask)
        if lengths.size and int(lengths.min()) == 0:
            raise ValueError("A text has no tokens (an all-zero attention_mask row); drop empty texts first.")
        self.pools = any(kernel is not None for kernel in config.kernel_sizes)
        if self.pools and lengths.size and int(lengths.max()) > config.max_position_embeddings:
            raise ValueError(
                f"A text has {int(lengths.max())} tokens but the pooling schedule reaches one vector only up to "
                f"max_position_embeddings={config.max_position_embeddings}; truncate to that length."
            )
        if capacity is not None and (
            lengths.size > capacity[0] or int(lengths.sum()) > capacity[1] or int(lengths.max()) > capacity[2]
        ):
            raise ValueError(
                f"A batch of {lengths.size} texts, {int(lengths.sum())} tokens, longest {int(lengths.max())}, does "
                f"not fit the static capacity (texts, tokens, longest) = {capacity}; use a larger bucket."
            )
        self.device = torch.device(device)
        self.varlen = varlen
        arrays = DeviceArrays()
        if capacity is not None and gather is None:
            gather = np.arange(int(lengths.sum()))
        self._gather = None if gather is None else arrays.add(gather, capacity and capacity[1])
        padded = not varlen
        if capacity is not None:
            sequences, rows, longest = capacity
            lengths = np.pad(lengths, (0, sequences - lengths.size))  # empty sequences
            current = SequenceLayout(lengths, arrays, False, (rows, longest))
        else:
            current = SequenceLayout(lengths, arrays, padded)
        self._positions = arrays.add(current.positions_host, capacity and current.rows)
        self.input = current
        layouts, pooled = [current], {}
        parts = plan_parts(self.device, config.pooling_implementation, torch.is_grad_enabled())
        self.layers: list[LayerPlan] = []
        for index in range(config.num_hidden_layers):
            kernel, stride = config.kernel_sizes[index], config.strides[index]
            if kernel is None:
                self.layers.append(LayerPlan(None, None, current, current, current, varlen=varlen))
                continue
            key = (id(current), kernel, stride)
            if key not in pooled:
                pool_capacity = layout_capacity = None
                if capacity is not None:  # n_out(L) <= min(L, L / s + 1) for s <= k; lengths 0 and 1 stay
                    longest = config.sequence_lengths(capacity[2])[index + 1]  # the schedule's bound
                    rows_out = current.rows
                    if current.max_length > 1:
                        rows_out = min(current.rows, current.rows // stride + capacity[0])
                    pool_capacity, layout_capacity = (current.rows, rows_out, longest), (rows_out, longest)
                pool = PoolPlan(current.lengths, kernel, stride, arrays, pool_capacity, parts)
                pool.centre_key = arrays.add(2 * stride * pool.window_index + (kernel - 1), capacity and pool.total_out)
                smaller = SequenceLayout(pool.out_lengths, arrays, padded and capacity is None, layout_capacity)
                pooled[key] = (pool, smaller)
                layouts.append(smaller)
            pool, smaller = pooled[key]
            location = config.pooling_location
            query, keys = {"intra": (smaller, current), "pre": (smaller, smaller)}.get(location, (current, current))
            self.layers.append(LayerPlan(location, pool, query, keys, smaller, varlen=varlen))
            current = smaller
        self.output = current
        if not self.pools and current._pad is None:  # the padded token states are the output
            current._register_padding(arrays)
        arrays.transfer(self.device, into=into._arrays if into is not None else None)
        self._arrays = arrays
        for layout in layouts:
            if layout._pad is not None:
                layout.ensure_padding(self.device)
        if config.rotary_positions:
            self._gather_rotary_rows(config, dtype)

    def _gather_rotary_rows(self, config: TiteConfig, dtype: torch.dtype) -> None:
        """Each layer's rotary positions; on the table path also its table rows, gathered once per batch."""
        table_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        fused = fused_rotary_available(self.device, dtype)
        gathered: dict = {}
        for index, layer in enumerate(self.layers):
            if layer.key.max_length <= 1:  # attention over one key is its value: no Q, K or RoPE
                continue
            layer.rotary_key_index = layer.key.rotary_index
            layer.rotary_query_index = layer.rotary_key_index
            if layer.location == "intra":  # pooled queries sit at their windows' centres
                layer.rotary_query_index = self._arrays[layer.pool.centre_key]
            if fused:
                continue
            head_dim = config.hidden_sizes[index] // config.num_attention_heads[index]
            needed = 2 * layer.key.max_length + (layer.pool.kernel_size if layer.pool else 0) + 1
            table = rotary_table(head_dim, config.rope_theta, needed, self.device, table_dtype)
            sources = {"key": (id(layer.key), layer.rotary_key_index)}
            if layer.location == "intra":
                sources["query"] = (("centre", id(layer.pool)), layer.rotary_query_index)
            for role, (source, rows) in sources.items():
                if (source, head_dim) not in gathered:
                    gathered[source, head_dim] = table.index_select(0, rows)
                setattr(layer, f"rotary_{role}", gathered[source, head_dim])
            if layer.location != "intra":
                layer.rotary_query = layer.rotary_key

    @property
    def gather(self) -> torch.Tensor | None:
        """Flat index into ``input_ids.view(-1)`` of every real token (None when nothing is padded)."""
        return None if self._gather is None else self._arrays[self._gather]

    @property
    def positions(self) -> torch.Tensor:
        """Position of every packed input row inside its text (absolute position embeddings)."""
        return self._arrays[self._positions]


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


class TiteEmbeddings(nn.Module):
    """Token (+ absolute position, + token type) embeddings, LayerNorm, dropout.

    With upscaling the token table has the FINAL width and a bias-free down-projection maps it to
    the first layer's width (paper Sec. 3.2: E' = (W^o)^T W^e), so a decoder can be tied to it.
    """

    def __init__(self, config: TiteConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.embedding_projection = (
            nn.Linear(config.hidden_size, config.embedding_size, bias=False)
            if config.hidden_size != config.embedding_size
            else None
        )
        self.position_embeddings = (
            nn.Embedding(config.max_position_embeddings, config.embedding_size)
            if config.absolute_positions
            else None
        )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.embedding_size) if config.type_vocab_size else None
        )
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None):
        embeddings = self.word_embeddings(input_ids)
        if self.embedding_projection is not None:
            embeddings = self.embedding_projection(embeddings)
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


# --------------------------------------------------------------------------------------------
# Attention with pooling
# --------------------------------------------------------------------------------------------


def eager_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Plain softmax attention; ``query`` ``(batch, heads, len_q, dim)``, boolean ``attention_mask`` keeps keys."""
    scores = (query @ key.transpose(-1, -2)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    probabilities = F.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return (probabilities @ value).transpose(1, 2), probabilities


class TiteAttention(nn.Module):
    """Self-attention of one layer, with attention-based pooling at the configured location (Fig. 2).

    Q/K/V project from the previous width to this layer's width (upscaling); the residual is the
    (pooled, for pre/intra) input zero-padded on the feature axis.
    """

    def __init__(self, config: TiteConfig, layer_index: int):
        super().__init__()
        self.config = config
        self.in_width = config.hidden_sizes[layer_index - 1] if layer_index else config.embedding_size
        self.width = config.hidden_sizes[layer_index]
        self.heads = config.num_attention_heads[layer_index]
        self.kernel_size = config.kernel_sizes[layer_index]
        self.stride = config.strides[layer_index]
        self.query = nn.Linear(self.in_width, self.width)
        self.key = nn.Linear(self.in_width, self.width)
        self.value = nn.Linear(self.in_width, self.width)
        self.dense = nn.Linear(self.width, self.width)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(self.width, eps=config.layer_norm_eps)
        self.is_causal = False
        self.layer_idx = layer_index
        self._fused_projections: dict = {}  # inference cache of concatenated weights, see :meth:`_project`

    def _project(self, names: tuple[str, ...], states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``getattr(self, name)(states)`` for each of ``names`` (e.g. query, key, value) as ONE matrix
        product with the weights concatenated on the output axis; returns ``(rows, width)`` views.

        One GEMM instead of two or three: fewer launches and host dispatches per layer, and in the
        backward one GEMM per gradient instead of one per projection plus the sums. Without gradients
        the concatenated weights are cached (keyed on each parameter's storage and version, so an
        optimizer step, ``load_state_dict`` or ``.to()`` rebuilds them); under autograd and during CUDA
        graph capture they are concatenated in the forward, so gradients and graph replays see the
        live parameters. Projections replaced or hooked (adapters, quantised layers) run one by one.
        """
        modules = [getattr(self, name) for name in names]
        if any(type(module) is not nn.Linear or module.bias is None or module._forward_hooks
               or module._forward_pre_hooks for module in modules):
            return tuple(module(states) for module in modules)
        weights, biases = [module.weight for module in modules], [module.bias for module in modules]
        live = (torch.is_grad_enabled() and any(p.requires_grad for p in weights + biases)) or (
            states.is_cuda and torch.cuda.is_current_stream_capturing()
        )
        key = None
        if not live:
            try:
                key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in weights + biases)
            except RuntimeError:  # inference tensors have no version counter: nothing to key a cache on
                pass
        cached = self._fused_projections.get(names)
        if key is not None and cached is not None and cached[0] == key:
            fused = cached[1]
        else:
            with torch.inference_mode(False) if key is not None else contextlib.nullcontext():
                fused = (torch.cat(weights), torch.cat(biases))  # cached: an ordinary tensor, usable anywhere
            if key is not None:
                self._fused_projections[names] = (key, fused)
        return F.linear(states, *fused).split([module.out_features for module in modules], dim=-1)

    def forward(self, states: torch.Tensor, plan: LayerPlan) -> torch.Tensor:
        """``states`` ``(plan.key.rows or pool input rows, in_width)`` -> ``(plan.output.rows, width)``."""
        key_states = states
        if plan.location in ("pre", "intra"):
            query_states = pool_planned(states, plan.pool, self.config.pooling_implementation)
            if plan.location == "pre":  # attention over the pooled sequence only
                key_states = query_states
        else:
            query_states = states
        residual = query_states
        if self.width != self.in_width:  # upscaling: zero-pad the residual on the feature axis
            residual = F.pad(query_states, (0, self.width - self.in_width))
        head_dim = self.width // self.heads
        if plan.key.max_length == 1:
            # softmax over a single key is 1: attention is the value projection, so Q, K and RoPE
            # are skipped (FlashAttention varlen also breaks on max_seqlen 1). Pooling keeps a length
            # of 1 at 1, so every query row is its sequence's only key row.
            attended = self.value(key_states).view(-1, self.heads, head_dim)
        else:
            if query_states is key_states:  # no pooling here, or pre pooling: one product for Q, K and V
                query, key, value = self._project(("query", "key", "value"), key_states)
            else:  # intra pooling: pooled queries, full-length keys and values
                query = self.query(query_states)
                key, value = self._project(("key", "value"), key_states)
            attended = self._attend(
                query.view(-1, self.heads, head_dim), key.view(-1, self.heads, head_dim),
                value.view(-1, self.heads, head_dim), plan,
            )
        hidden = self.dropout(self.dense(attended.reshape(-1, self.width))) + residual
        if plan.location == "post":  # after the residual connection, before the normalisation
            hidden = pool_planned(hidden, plan.pool, self.config.pooling_implementation)
        return self.LayerNorm(hidden)

    def _attend(self, query, key, value, plan: LayerPlan):
        """RoPE on the projected ``(rows, heads, head_dim)`` queries and keys (integer key positions,
        window-centre query positions), then attention of the packed rows, dispatched by
        ``config._attn_implementation`` through transformers' attention registry (eager / sdpa /
        flash_attention_2 / ...). ``sdpa`` means PyTorch's own kernels: varlen flash attention on the
        packed rows where it applies (CUDA, fp16/bf16), padded ``scaled_dot_product_attention`` elsewhere."""
        head_dim = self.width // self.heads
        if plan.rotary_key_index is not None:
            query, key = apply_rotary(
                query, key, plan.rotary_query_index, plan.rotary_key_index, self.config.rope_theta,
                plan.rotary_query, plan.rotary_key,
            )
        implementation = self.config._attn_implementation or "sdpa"
        dropout = self.config.attention_probs_dropout_prob if self.training else 0.0
        scaling = head_dim**-0.5
        if implementation == "sdpa" and plan.varlen and varlen_attention_applies(query, dropout):
            return packed_flash_attention(query, key, value, plan.query, plan.key, dropout, scaling)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if implementation.startswith("flash_attention"):
            # packed rows as one "batch" of varlen sequences: no padding at all
            output, _ = attention(
                self, query[None].transpose(1, 2), key[None].transpose(1, 2), value[None].transpose(1, 2), None,
                dropout=dropout, scaling=scaling,
                cu_seq_lens_q=plan.query.cu_seqlens, cu_seq_lens_k=plan.key.cu_seqlens,
                max_length_q=plan.query.max_length, max_length_k=plan.key.max_length,
            )
            return output[0]
        for layout in (plan.query, plan.key):
            layout.ensure_padding(query.device)
        output, _ = attention(
            self,
            plan.query.pad(query).transpose(1, 2),
            plan.key.pad(key).transpose(1, 2),
            plan.key.pad(value).transpose(1, 2),
            plan.key.key_mask(),
            dropout=dropout,
            scaling=scaling,
        )
        return plan.query.unpad(output)


class TiteLayer(GradientCheckpointingLayer):
    """Attention (with pooling) + feed-forward, post-norm as in BERT."""

    def __init__(self, config: TiteConfig, layer_index: int):
        super().__init__()
        width = config.hidden_sizes[layer_index]
        self.attention = TiteAttention(config, layer_index)
        self.intermediate = nn.Linear(width, config.intermediate_sizes[layer_index])
        self.activation = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.intermediate_sizes[layer_index], width)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)

    def forward(self, states: torch.Tensor, plan: LayerPlan) -> torch.Tensor:
        attended = self.attention(states, plan)
        hidden = self.dropout(self.output(self.activation(self.intermediate(attended))))
        return self.LayerNorm(hidden + attended)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class TitePreTrainedModel(StrictLoadingMixin, SentenceTransformersFilesMixin, PreTrainedModel):
    """Shared base; ``save_pretrained`` also writes the sentence-transformers files (the vector sits at
    position 0 of ``last_hidden_state``: CLS pooling, dot product)."""

    config_class = TiteConfig
    config: TiteConfig
    base_model_prefix = "tite"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _no_split_modules = ["TiteLayer"]

    @classmethod
    def native_sentence_transformers_pipeline(cls, config) -> tuple[str, str]:
        """The text's single vector (position 0 of ``last_hidden_state``), compared by dot product."""
        return "cls", "dot"

    @torch.no_grad()
    def _init_weights(self, module):
        """BERT initialisation: normal(0, initializer_range), zero biases, unit LayerNorm."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()


class TiteModel(TitePreTrainedModel):
    """The TITE encoder: one vector per text.

    ``pooler_output`` ``(batch, hidden)`` is the text's vector and ``last_hidden_state``
    ``(batch, 1, hidden)`` the same vector as a length-1 sequence. A configuration without pooling
    returns the padded token states instead and its first token as ``pooler_output``. With
    ``config.projection_size`` both pass through one linear layer (``projection``), as a Lightning IR
    bi-encoder's output does.
    """

    # a pre-training checkpoint (TiteForPreTraining) loaded as the encoder: its decoder and heads are dropped
    _keys_to_ignore_on_load_unexpected = [r"^(mae_decoder|mae_head|bow_head)\."]

    def __init__(self, config: TiteConfig):
        super().__init__(config)
        self.embeddings = TiteEmbeddings(config)
        self.layers = nn.ModuleList([TiteLayer(config, index) for index in range(config.num_hidden_layers)])
        self.projection = (
            nn.Linear(config.hidden_size, config.projection_size, bias=config.projection_bias)
            if config.projection_size is not None
            else None
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def _compute_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype the layers compute in: the weights', or the CUDA autocast dtype."""
        if device.type == "cuda" and torch.is_autocast_enabled("cuda"):
            return torch.get_autocast_dtype("cuda")
        return self.embeddings.word_embeddings.weight.dtype

    def plan(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> TitePlan:
        """The batch's :class:`TitePlan`: reads the mask on the host once (not at all for a CPU mask)."""
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(
                f"input_ids must be (batch, length) with at least one token, got shape {tuple(input_ids.shape)}."
            )
        device = input_ids.device
        dtype = self._compute_dtype(device)
        dropout = self.config.attention_probs_dropout_prob if self.training else 0.0
        varlen = (self.config._attn_implementation or "sdpa") == "sdpa" and varlen_attention_runs(device, dtype, dropout)
        return TitePlan(self.config, attention_mask, tuple(input_ids.shape), device, varlen, dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """``attention_mask`` may be a CPU tensor while ``input_ids`` is on the GPU: then the forward
        reads nothing from the device; otherwise it reads the mask once (the plan)."""
        if self._graphs_apply(input_ids):
            vectors = self._graphed_forward(input_ids, attention_mask, token_type_ids)
            if self.projection is not None:
                vectors = self.projection(vectors)
            output = BaseModelOutputWithPooling(last_hidden_state=vectors[:, None], pooler_output=vectors)
            return output.to_tuple() if return_dict is False else output
        plan = self.plan(input_ids, attention_mask)
        flat_ids = input_ids.reshape(-1)
        if self.embeddings.token_type_embeddings is None:
            token_type_ids = None  # no token-type table (the default): nothing to gather
        types = token_type_ids.reshape(-1) if token_type_ids is not None else None
        if plan.gather is not None:  # unpad once: the real tokens, left-aligned or not
            flat_ids = flat_ids.index_select(0, plan.gather)
            types = types.index_select(0, plan.gather) if types is not None else None
        states = self.embeddings(flat_ids, plan.positions, types)
        for layer, layer_plan in zip(self.layers, plan.layers):
            states = layer(states, layer_plan)
        if self.projection is not None:
            states = self.projection(states)
        if plan.pools:
            vectors = states  # every text is one vector now: (batch, hidden)
            output = BaseModelOutputWithPooling(last_hidden_state=vectors[:, None], pooler_output=vectors)
        else:
            padded = plan.output.pad(states)
            output = BaseModelOutputWithPooling(last_hidden_state=padded, pooler_output=padded[:, 0])
        return output.to_tuple() if return_dict is False else output

    # ---------------------------------------------------------------- CUDA graphs (inference)

    def _graphs_apply(self, input_ids: torch.Tensor) -> bool:
        if not getattr(self.config, "cuda_graphs", False) or not input_ids.is_cuda or self.training:
            return False
        if torch.is_grad_enabled() or torch.cuda.is_current_stream_capturing():
            return False
        dtype = self._compute_dtype(input_ids.device)
        return (
            any(kernel is not None for kernel in self.config.kernel_sizes)
            and (self.config._attn_implementation or "sdpa") == "sdpa"
            and varlen_attention_supported(input_ids.device, dtype)
            and fused_rotary_available(input_ids.device, dtype)
            and self.config.pooling_implementation != "torch"
        )

    @staticmethod
    def _bucket(value: int, minimum: int) -> int:
        """Round up to a multiple of an eighth of the power of two below (at most 12.5 % waste)."""
        value = max(value, minimum)
        step = max(1, (1 << (value.bit_length() - 1)) // 8)
        return -(-value // step) * step

    def _graphed_forward(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        """The layers as a CUDA graph replay: the plan's arrays are copied into the bucket's static
        buffer, the embeddings of the real tokens into its static input rows, then one replay."""
        device = input_ids.device
        host_mask = attention_mask.detach().to("cpu") if attention_mask is not None else None  # the one sync
        lengths = host_mask.sum(-1) if host_mask is not None else torch.full((input_ids.shape[0],), input_ids.shape[1])
        batch, tokens, longest = int(lengths.numel()), int(lengths.sum()), int(lengths.max())
        capacity = (self._bucket(batch, 8), self._bucket(tokens, 256), min(
            1 << max(longest - 1, 1).bit_length(), self.config.max_position_embeddings))
        dtype = self._compute_dtype(device)
        graphs = self.__dict__.setdefault("_cuda_graphs", OrderedDict())
        key = (device, dtype, capacity)
        entry = graphs.get(key)
        plan = TitePlan(self.config, host_mask, tuple(input_ids.shape), device, True, dtype, capacity,
                        into=entry["plan"] if entry else None)
        flat_ids = input_ids.reshape(-1).index_select(0, plan.gather[:tokens])
        types = None
        if token_type_ids is not None and self.embeddings.token_type_embeddings is not None:
            types = token_type_ids.reshape(-1).index_select(0, plan.gather[:tokens])
        states = self.embeddings(flat_ids, plan.positions[:tokens], types)
        if entry is None:
            static_in = states.new_zeros((capacity[1], states.shape[1]))
            static_in[:tokens].copy_(states)

            def layers(hidden):
                for layer, layer_plan in zip(self.layers, plan.layers):
                    hidden = layer(hidden, layer_plan)
                return hidden

            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                layers(static_in)  # warm-up outside the capture: kernels compiled, workspaces allocated
            torch.cuda.current_stream(device).wait_stream(side)
            pool = self.__dict__.setdefault("_cuda_graph_pool", torch.cuda.graph_pool_handle())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                static_out = layers(static_in)
            entry = graphs[key] = {"plan": plan, "graph": graph, "input": static_in, "output": static_out}
            while len(graphs) > 16:
                graphs.popitem(last=False)
        else:
            graphs.move_to_end(key)
            entry["input"][:tokens].copy_(states)
        entry["graph"].replay()
        return entry["output"][:batch].clone()  # the static output is overwritten by the next replay

    @classmethod
    def from_backbone(cls, name_or_path, config: TiteConfig | None = None, **config_overrides):
        """Warm-start a TITE from a BERT-family checkpoint (beyond the paper, which trains from scratch).

        Embeddings and layer i are copied exactly into TITE layer i, so the TITE config must have the
        backbone's depth, widths, head counts and feed-forward sizes (pooling is free: e.g. preset
        ``minilm-l6-3-all`` for 6-layer MiniLMs). Learned absolute positions are kept when the config
        uses ``position_embedding_type="absolute"`` (rotary configs drop them, logged); without
        token types (``type_vocab_size=0``) BERT's type-0 vector is folded into the word embeddings,
        which is exact. Without ``config``, one is derived from the backbone (no pooling, absolute
        positions) and ``config_overrides`` apply.
        """
        from transformers import AutoConfig, BertModel

        source_config = AutoConfig.from_pretrained(name_or_path)
        if source_config.model_type != "bert":
            raise ValueError(
                f"{name_or_path} is a {source_config.model_type!r} checkpoint; TITE warm-starts from BERT-architecture "
                "checkpoints (model_type 'bert'), whose layers it copies one to one."
            )
        if config is None:
            derived = dict(
                vocab_size=source_config.vocab_size,
                num_hidden_layers=source_config.num_hidden_layers,
                hidden_sizes=source_config.hidden_size,
                num_attention_heads=source_config.num_attention_heads,
                intermediate_sizes=source_config.intermediate_size,
                kernel_sizes=None,
                max_position_embeddings=source_config.max_position_embeddings,
                position_embedding_type="absolute",
                type_vocab_size=source_config.type_vocab_size,
                hidden_act=source_config.hidden_act,
                layer_norm_eps=source_config.layer_norm_eps,
                pad_token_id=source_config.pad_token_id,
            )
            config = TiteConfig(**{**derived, **config_overrides})
        elif config_overrides:
            raise ValueError("Pass either a config or config overrides to from_backbone, not both.")
        expected = {
            "num_hidden_layers": (config.num_hidden_layers, source_config.num_hidden_layers),
            "hidden_sizes": (set(config.hidden_sizes), {source_config.hidden_size}),
            "num_attention_heads": (set(config.num_attention_heads), {source_config.num_attention_heads}),
            "intermediate_sizes": (set(config.intermediate_sizes), {source_config.intermediate_size}),
            "vocab_size": (config.vocab_size, source_config.vocab_size),
            "hidden_act": (config.hidden_act, source_config.hidden_act),
        }
        mismatched = {name: values for name, values in expected.items() if values[0] != values[1]}
        if mismatched:
            details = "; ".join(f"{name}: TITE {ours} vs backbone {theirs}" for name, (ours, theirs) in mismatched.items())
            raise ValueError(
                f"The TITE config does not have the shape of {name_or_path} ({details}). Warm starts copy layers one to "
                "one: give a config with the backbone's depth and widths (only pooling may differ), or omit it."
            )
        if config.absolute_positions and config.max_position_embeddings > source_config.max_position_embeddings:
            raise ValueError(
                f"max_position_embeddings={config.max_position_embeddings} exceeds the backbone's "
                f"{source_config.max_position_embeddings} learned positions; lower it."
            )
        class BertBackbone(BertModel):  # what a warm start drops is expected: no load report for it
            _keys_to_ignore_on_load_unexpected = [r"(^|\.)pooler\.", r"^cls\."]

        bert = BertBackbone.from_pretrained(name_or_path, add_pooling_layer=False)
        state = bert_to_tite_state_dict(bert.state_dict())
        positions = state.pop("embeddings.position_embeddings.weight")
        token_types = state.pop("embeddings.token_type_embeddings.weight")
        if config.absolute_positions:
            state["embeddings.position_embeddings.weight"] = positions[: config.max_position_embeddings]
        else:
            logger.warning(
                f"{name_or_path}'s learned absolute positions are not used: this TITE config uses rotary positions, "
                "which the copied layers have never seen. Set position_embedding_type='absolute' to keep them."
            )
        if config.type_vocab_size:
            state["embeddings.token_type_embeddings.weight"] = token_types[: config.type_vocab_size]
        else:  # every token is type 0 in single-text encoding: fold that vector into the word table
            state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"] + token_types[0]
        model = cls(config)
        model.load_state_dict(state, strict=True)
        model.config.name_or_path = str(name_or_path)
        return model


# --------------------------------------------------------------------------------------------
# Pre-training: enhanced masked auto-encoding + bag-of-words (paper Sec. 3.3)
# --------------------------------------------------------------------------------------------


@dataclass
class TiteForPreTrainingOutput(ModelOutput):
    """Output of :class:`TiteForPreTraining`.

    Args:
        loss: ``mae_loss + bow_loss`` (unweighted, as in the paper).
        mae_loss: enhanced masked auto-encoding cross-entropy over the non-special tokens.
        bow_loss: bag-of-words binary cross-entropy over the vocabulary.
        pooler_output: ``(batch, hidden)`` the text vectors.
    """

    loss: torch.FloatTensor | None = None
    mae_loss: torch.FloatTensor | None = None
    bow_loss: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None


class TitePredictionHead(nn.Module):
    """Dense + activation + LayerNorm, then the vocabulary decoder tied to the (final-width) word table."""

    def __init__(self, config: TiteConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.LayerNorm(self.activation(self.dense(states))))


class TiteMaeDecoder(nn.Module):
    """One-layer enhanced decoder (RetroMAE-style, paper Sec. 3.3).

    Queries: the text vector plus the position embedding of every position. Keys/values: the text
    vector (always visible) followed by the ORIGINAL token embeddings plus positions; each token
    key is visible to a query with probability ``1 - decoder_mask_probability``, never its own
    position and never padding.
    """

    def __init__(self, config: TiteConfig):
        super().__init__()
        width, heads = config.hidden_size, config.num_attention_heads[-1]
        self.heads = heads
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.dense = nn.Linear(width, width)
        self.attention_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(width, config.intermediate_sizes[-1])
        self.activation = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.intermediate_sizes[-1], width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, vectors: torch.Tensor, token_embeddings: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """``vectors`` (batch, width), ``token_embeddings`` (batch, len, width), ``visible`` (batch, len, len)."""
        batch, length, width = token_embeddings.shape
        positions = self.position_embeddings(torch.arange(length, device=vectors.device))[None]
        queries_in = vectors[:, None, :] + positions
        keys_in = torch.cat([vectors[:, None, :], token_embeddings + positions], dim=1)
        mask = torch.cat([visible.new_ones(batch, length, 1), visible], dim=-1)[:, None]  # text vector always visible
        head_dim = width // self.heads

        def split(x):
            return x.view(batch, -1, self.heads, head_dim).transpose(1, 2)

        attended = F.scaled_dot_product_attention(
            split(self.query(queries_in)), split(self.key(keys_in)), split(self.value(keys_in)), attn_mask=mask
        ).transpose(1, 2).reshape(batch, length, width)
        hidden = self.attention_norm(self.dropout(self.dense(attended)) + queries_in)
        return self.LayerNorm(self.dropout(self.output(self.activation(self.intermediate(hidden)))) + hidden)


class TiteForPreTraining(TitePreTrainedModel):
    """TITE pre-training: enhanced masked auto-encoding + bag-of-words, summed (paper Sec. 3.3).

    No input masking by default (the encoder reads the whole text); the decoder hides each token key
    with probability ``decoder_mask_probability`` (0.5). Both decoders are tied to the final-width
    word table (with upscaling, the composed embedding E' = (W^o)^T W^e). Padded keys are always
    hidden from the decoder (the reference implementation forgot this).
    """

    fresh_weight_prefixes = ("mae_decoder.", "mae_head.", "bow_head.")  # the heads on an encoder checkpoint
    _tied_weights_keys = {
        "mae_head.decoder.weight": "tite.embeddings.word_embeddings.weight",
        "bow_head.decoder.weight": "tite.embeddings.word_embeddings.weight",
    }

    def __init__(self, config: TiteConfig, decoder_mask_probability: float = 0.5):
        super().__init__(config)
        if config.projection_size is not None:
            raise ValueError(
                f"projection_size={config.projection_size}: pre-training reads the encoder's own vector; train "
                "without a projection (it belongs to fine-tuned bi-encoders)."
            )
        if not 0.0 <= decoder_mask_probability < 1.0:
            raise ValueError(f"decoder_mask_probability={decoder_mask_probability} must lie in [0, 1).")
        self.decoder_mask_probability = decoder_mask_probability
        self.tite = TiteModel(config)
        self.mae_decoder = TiteMaeDecoder(config)
        self.mae_head = TitePredictionHead(config)
        self.bow_head = TitePredictionHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.mae_head.decoder

    @classmethod
    def from_backbone(cls, name_or_path, config: TiteConfig | None = None, **config_overrides):
        """Encoder warm-started by :meth:`TiteModel.from_backbone`; decoders and heads fresh."""
        encoder = TiteModel.from_backbone(name_or_path, config, **config_overrides)
        model = cls(encoder.config)
        model.tite.load_state_dict(encoder.state_dict())
        model.tie_weights()
        return model

    def decoder_visibility(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Random (batch, query, key) visibility: p = 1 - decoder_mask_probability, own position and padding hidden."""
        batch, length = attention_mask.shape
        visible = torch.rand(batch, length, length, device=attention_mask.device) >= self.decoder_mask_probability
        visible &= ~torch.eye(length, dtype=torch.bool, device=attention_mask.device)
        return visible & attention_mask.bool()[:, None, :]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        decoder_visibility: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> TiteForPreTrainingOutput | tuple:
        """Targets are the ORIGINAL tokens: ``input_ids``, or ``labels`` where the collator masked inputs.

        Args:
            special_tokens_mask: 1 at special tokens (excluded from both losses); by default the first
                and last real token of each text ([CLS] / [SEP]).
            decoder_visibility: (batch, len, len) boolean keys visible per query; sampled when omitted.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        vectors = self.tite(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).pooler_output
        original = input_ids if labels is None else torch.where(labels != -100, labels, input_ids)
        real = attention_mask.bool()
        if special_tokens_mask is None:
            lengths = attention_mask.sum(-1)
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
            special_tokens_mask = (positions == 0) | (positions == (lengths - 1)[:, None])
        targets = real & ~special_tokens_mask.bool()
        if decoder_visibility is None:
            decoder_visibility = self.decoder_visibility(attention_mask)
        else:
            decoder_visibility = decoder_visibility.bool() & real[:, None, :]

        word_table = self.tite.embeddings.word_embeddings
        decoded = self.mae_decoder(vectors, word_table(original), decoder_visibility)
        mae_loss = F.cross_entropy(self.mae_head(decoded[targets]).float(), original[targets])

        bag = torch.zeros(input_ids.shape[0], self.config.vocab_size, device=input_ids.device)
        # multi-hot of the target token ids ("amax": non-targets point at id 0 with value 0 and never win)
        bag.scatter_reduce_(1, torch.where(targets, original, 0), targets.float(), reduce="amax")
        bow_loss = F.binary_cross_entropy_with_logits(self.bow_head(vectors).float(), bag)
        output = TiteForPreTrainingOutput(
            loss=mae_loss + bow_loss, mae_loss=mae_loss, bow_loss=bow_loss, pooler_output=vectors
        )
        return output.to_tuple() if return_dict is False else output


def bert_to_tite_state_dict(bert_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a ``BertModel`` state dict (``bert.`` prefix optional) to :class:`TiteModel`'s names.

    Layers map one to one (BERT layer i -> TITE layer i); pooler and MLM-head weights are dropped.
    """
    renames = (
        ("attention.self.query.", "attention.query."),
        ("attention.self.key.", "attention.key."),
        ("attention.self.value.", "attention.value."),
        ("attention.output.dense.", "attention.dense."),
        ("attention.output.LayerNorm.", "attention.LayerNorm."),
        ("intermediate.dense.", "intermediate."),
        ("output.dense.", "output."),
        ("output.LayerNorm.", "LayerNorm."),
    )
    mapped = {}
    for name, tensor in bert_state.items():
        name = name.removeprefix("bert.")
        if name.startswith("encoder.layer."):
            name = "layers." + name[len("encoder.layer."):]
            for old, new in renames:
                if old in name:
                    name = name.replace(old, new, 1)
                    break
        elif not name.startswith("embeddings.") or name.endswith("position_ids") or name.endswith("token_type_ids"):
            continue
        mapped[name] = tensor
    return mapped


TiteModel.register_for_auto_class("AutoModel")
TiteForPreTraining.register_for_auto_class("AutoModelForPreTraining")

__all__ = [
    "TitePreTrainedModel",
    "TiteModel",
    "TiteForPreTraining",
    "TiteForPreTrainingOutput",
    "TitePlan",
    "LayerPlan",
    "SequenceLayout",
    "apply_rotary",
    "rotary_table",
    "bert_to_tite_state_dict",
    "varlen_attention_supported",
]
