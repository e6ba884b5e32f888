"""TITE's batch plan: every index the pooling schedule determines for one batch, computed on the host.

TITE (Schlatt et al., "TITE: Token-Independent Text Encoder", SIGIR 2025) pools every text with the
schedule of its config (Sec. 3.1, Eq. 1: pool_{k,s}). :class:`TitePlan` applies that schedule to the
real lengths of one batch, read from the attention mask: each layer's ``cu_seqlens`` and max lengths
(:class:`SequenceLayout`), its pooling windows (``pooling_tite.PoolPlan``), the rows of the rotary
table and the padding indices where attention is padded (:class:`LayerPlan`). Every index array moves
to the device in one transfer, so the layers never read a device value on the host. No tracer follows
the mask's read on the host: under ``torch.export`` / ``torch.onnx.export`` / ``torch.compile`` the model
runs ``padded_tite``'s path, which computes the same indices from the mask with tensor operations.

Shipped as remote code next to every checkpoint: imports ``torch`` and ``numpy`` absolutely, its
sibling files relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .configuration_tite import TiteConfig
from .pooling_tite import DeviceArrays, PoolPlan, plan_parts, segment_positions
from .rotary_tite import fused_rotary_available, rotary_table


class SequenceLayout:
    """Packed rows of one set of sequence lengths (host ``lengths``; device indices after transfer).

    ``cu_seqlens`` (int32) and ``max_length`` serve varlen attention; ``pad`` / ``unpad`` move
    rows to and from a ``(batch, max_length)`` grid for padded attention (a free ``view`` when
    every sequence has the same length); ``rotary_index`` is ``2 * position`` of every row, its
    row in the half-position rotary table. ``returned_length``: the length the model returns this
    layout's hidden states and attention weights at (``output_hidden_states`` / ``output_attentions``):
    the input's length for the input's layout (the plan trims the input to its longest text; BERT returns
    them at the input's length), ``max_length`` for the others.
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
        self.positions_host = segment_positions(lengths)
        self._arrays = arrays
        self._cu = arrays.add(np.concatenate(([0], np.cumsum(lengths))))
        if capacity is not None:
            self.rows, self.max_length = capacity
            self.uniform = False
        self.returned_length = self.max_length  # TitePlan sets the input's layout's to the input's length
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

    def pad_returned(self, packed: torch.Tensor) -> torch.Tensor:
        """``(rows, ...)`` -> ``(batch, returned_length, ...)``: :meth:`pad`, zeros on to ``returned_length``."""
        padded = self.pad(packed)
        extra = self.returned_length - self.max_length
        return F.pad(padded, (0, 0) * (padded.dim() - 2) + (0, extra)) if extra else padded

    def unpad_returned(self, padded: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`pad_returned`."""
        return self.unpad(padded[:, : self.max_length])

    def returned_key_mask(self, device: torch.device) -> torch.Tensor | None:
        """:meth:`key_mask` over ``returned_length`` keys (the keys past ``max_length`` masked out)."""
        extra = self.returned_length - self.max_length
        if not extra:
            return self.key_mask()
        mask = self.key_mask()
        if mask is None:
            mask = torch.ones(self.batch_size, 1, 1, self.max_length, dtype=torch.bool, device=device)
        return torch.cat((mask, mask.new_zeros(*mask.shape[:-1], extra)), dim=-1)

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
    the rows of the rotary table, and the padding indices where attention is padded. The index arrays
    move to the device in one transfer, or, for a *staged* plan, in two: the unpooled layers that open
    the schedule (tite-2-late's first three) need only the input's layout, so the forward launches them
    first and plans the pooled layers on the host while the device runs them (:meth:`layer`). Either
    way the layers read no device value on the host.
    """

    def __init__(self, config: TiteConfig, attention_mask, shape, device, varlen: bool, dtype=torch.float32,
                 capacity: tuple[int, int, int] | None = None, into: TitePlan | None = None,
                 staged: bool | None = None):
        """``capacity`` ``(sequences, tokens, longest text)``: static shapes for a CUDA graph (varlen
        attention and Triton kernels only): the batch is padded with empty sequences, every layer's rows with rows
        of no sequence, and host sizes are upper bounds that depend on the capacity alone. ``into``:
        a plan of the same capacity whose device buffer the arrays are copied into (graph replay).
        ``staged``: plan the unpooled opening layers now and the rest on the first :meth:`layer` call past
        them (default: on CUDA without ``capacity``, where the device runs the opening layers meanwhile; a CUDA
        graph's plan is staged when asked, its two transfers going into ``into``'s two buffers)."""
        lengths, gather = _lengths_from_mask(attention_mask, shape)
        self.pools = any(kernel is not None for kernel in config.kernel_sizes)
        _check_lengths(config, lengths, capacity, self.pools)
        self.device = torch.device(device)
        self.varlen = varlen
        arrays = DeviceArrays()
        if capacity is not None and gather is None:
            gather = np.arange(int(lengths.sum()))
        self._gather = None if gather is None else arrays.add(gather, capacity and capacity[1])
        if capacity is not None:
            sequences, rows, longest = capacity
            lengths = np.pad(lengths, (0, sequences - lengths.size))  # empty sequences
            self.input = SequenceLayout(lengths, arrays, False, (rows, longest))
        else:
            self.input = SequenceLayout(lengths, arrays, not varlen)
            self.input.returned_length = max(int(shape[1]), self.input.max_length)
        self._positions = arrays.add(self.input.positions_host, capacity and self.input.rows)
        self._config, self._dtype, self._capacity = config, dtype, capacity
        self._layer_plans: list[LayerPlan] = []
        self._current, self._pooled, self._rotary_rows = self.input, {}, {}
        self.opening = opening_layers(config)
        if staged is None:
            staged = self.device.type == "cuda" and capacity is None
        self.staged = bool(staged) and 0 < self.opening < config.num_hidden_layers
        self._into = into  # a captured plan whose buffers this one's transfers overwrite
        self._later: DeviceArrays | None = None  # the second transfer of a staged plan
        self._stage(arrays, self.opening if self.staged else config.num_hidden_layers,
                    into._arrays if into is not None else None)
        self._arrays = arrays  # the first (or only) transfer: gather, positions, the input's layout

    def _stage(self, arrays: DeviceArrays, stop: int, into: DeviceArrays | None = None) -> None:
        """Plan layers ``len(self._layer_plans)`` to ``stop`` into ``arrays``, transfer them, and finish what
        needs their device views (padding indices, rotary rows)."""
        first = len(self._layer_plans)
        layouts = [self.input] if first == 0 else []
        layouts += self._plan_layers(self._config, arrays, self._capacity, first, stop)
        if stop == self._config.num_hidden_layers:
            self._output = self._current
            if not self.pools and self._output._pad is None:  # the padded token states are the output
                self._output._register_padding(arrays)
        arrays.transfer(self.device, into=into)
        for layout in layouts:
            if layout._pad is not None:
                layout.ensure_padding(self.device)
        if self._config.rotary_positions:
            self._gather_rotary_rows(self._config, self._dtype, first)

    def layer(self, index: int) -> LayerPlan:
        """Layer ``index``'s plan; for a staged plan, the first call past the opening layers plans the rest."""
        if index >= len(self._layer_plans):
            into = None
            if self._into is not None:
                into = self._into._later
                if into is None:
                    raise RuntimeError("TitePlan(into=plan): that plan's pooled layers were never planned; "
                                       "complete it (plan.layers) before planning into it")
            self._later = DeviceArrays()
            self._stage(self._later, self._config.num_hidden_layers, into)
        return self._layer_plans[index]

    @property
    def layers(self) -> list[LayerPlan]:
        """Every layer's :class:`LayerPlan` (planning the rest of a staged plan first)."""
        return [self.layer(index) for index in range(self._config.num_hidden_layers)]

    @property
    def output(self) -> SequenceLayout:
        """The last layer's layout (planning the rest of a staged plan first)."""
        self.layer(self._config.num_hidden_layers - 1)
        return self._output

    def _plan_layers(self, config: TiteConfig, arrays: DeviceArrays, capacity, first: int,
                     stop: int) -> list[SequenceLayout]:
        """Layers ``first`` to ``stop``'s :class:`LayerPlan` (appended to ``self._layer_plans``), continuing from
        the layout ``self._current``; returns the pooled layouts made. Layers that pool the same layout with the
        same window share one pooling step."""
        parts = plan_parts(self.device, config.pooling_implementation, torch.is_grad_enabled())
        padded = not self.varlen and capacity is None
        current, layouts, pooled = self._current, [], self._pooled
        for index in range(first, stop):
            kernel, stride = config.kernel_sizes[index], config.strides[index]
            if kernel is None:
                self._layer_plans.append(LayerPlan(None, None, current, current, current, varlen=self.varlen))
                continue
            key = (id(current), kernel, stride)
            if key not in pooled:
                pooled[key] = _pooling_step(config, index, current, arrays, parts, padded, capacity)
                layouts.append(pooled[key][1])
            pool, smaller = pooled[key]
            location = config.pooling_location
            query, keys = {"intra": (smaller, current), "pre": (smaller, smaller)}.get(location, (current, current))
            self._layer_plans.append(LayerPlan(location, pool, query, keys, smaller, varlen=self.varlen))
            current = smaller
        self._current = current
        return layouts

    def _gather_rotary_rows(self, config: TiteConfig, dtype: torch.dtype, first: int) -> None:
        """The rotary positions of the layers from ``first`` on; on the table path also their table rows, each
        gathered once per batch."""
        table_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        fused = fused_rotary_available(self.device, dtype)
        gathered = self._rotary_rows
        for index, layer in enumerate(self._layer_plans[first:], start=first):
            if layer.key.max_length <= 1:  # attention over one key is its value: no Q, K or RoPE
                continue
            layer.rotary_key_index = layer.key.rotary_index
            layer.rotary_query_index = layer.rotary_key_index
            if layer.location == "intra":  # pooled queries sit at their windows' centres
                layer.rotary_query_index = layer.pool._arrays[layer.pool.centre_key]
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


def opening_layers(config: TiteConfig) -> int:
    """How many layers open the schedule without pooling (they need only the input's layout)."""
    return next((index for index, kernel in enumerate(config.kernel_sizes) if kernel is not None),
                config.num_hidden_layers)


def _lengths_from_mask(attention_mask, shape) -> tuple[np.ndarray, np.ndarray | None]:
    """Each text's token count and the flat index of every real token in ``input_ids.view(-1)``
    (None when nothing is padded): the forward's one host read of the mask."""
    batch, length = shape
    if attention_mask is None:
        return np.full(batch, length, dtype=np.int64), None
    if attention_mask.device.type != "cpu" and attention_mask.dim() == 2 and batch:
        # a device mask: read each text's token count and whether every row is its tokens then padding (the
        # tokenizers' right padding), batch + 1 numbers instead of the whole mask; the gather follows from them
        on_device = attention_mask.detach() != 0
        lengths = on_device.sum(1)
        leading = on_device == (torch.arange(length, device=on_device.device) < lengths[:, None])
        counts = torch.cat((lengths, leading.all()[None].to(lengths.dtype))).to("cpu").numpy()
        if counts[-1]:
            lengths = counts[:-1].astype(np.int64)
            return lengths, None if int(lengths.min()) == length else right_padded_gather(lengths, length)
    mask = attention_mask.detach().to("cpu").numpy() != 0
    lengths = mask.sum(1).astype(np.int64)
    return lengths, None if bool(mask.all()) else np.flatnonzero(mask)


def right_padded_gather(lengths: np.ndarray, length: int) -> np.ndarray:
    """The flat index in ``input_ids.view(-1)`` of every real token of texts padded on the right to ``length``."""
    return np.repeat(np.arange(lengths.size, dtype=np.int64) * length, lengths) + segment_positions(lengths)


def _empty_texts_message(rows: list[int]) -> str:
    """The one-line refusal of a batch whose ``rows`` have no tokens, naming every one of them.

    The rows are those of the batch the model was given: the caller's own when it tokenized its list itself.
    ``SentenceTransformer.encode*`` batches texts sorted by length and gives the model no way to know the
    caller's positions, so the message also says how to find the empty texts in the list that was encoded."""
    named = str(rows[0]) if len(rows) == 1 else f"{', '.join(map(str, rows[:-1]))} and {rows[-1]}"
    return (
        f"Text{'s' if len(rows) > 1 else ''} {named} of the batch {'are' if len(rows) > 1 else 'is'} empty (no "
        "tokens, an all-zero attention_mask row): this model gives no vector for an empty text; drop empty texts "
        "first. Through SentenceTransformer.encode / encode_query / encode_document these are rows of its batches "
        "sorted by length, not positions in your list; the empty texts of your list are "
        "[i for i, text in enumerate(texts) if not text.strip()]."
    )


def _check_lengths(config: TiteConfig, lengths: np.ndarray, capacity, pools: bool) -> None:
    """Refuse a batch the schedule or the static capacity cannot take, naming the fix."""
    if lengths.size and int(lengths.min()) == 0:
        raise ValueError(_empty_texts_message(np.flatnonzero(lengths == 0).tolist()))
    if pools and lengths.size and int(lengths.max()) > config.max_position_embeddings:
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


def _pooling_step(config: TiteConfig, index: int, current: SequenceLayout, arrays: DeviceArrays,
                  parts: frozenset, padded: bool, capacity) -> tuple[PoolPlan, SequenceLayout]:
    """Layer ``index``'s pooling (Eq. 1, pool_{k,s}) of the ``current`` layout: its :class:`PoolPlan`,
    with the rotary index of every window centre registered, and the pooled layout."""
    kernel, stride = config.kernel_sizes[index], config.strides[index]
    pool_capacity = layout_capacity = None
    if capacity is not None:  # n_out(L) <= min(L, L / s + 1) for s <= k; lengths 0 and 1 stay
        longest = config.sequence_lengths(capacity[2])[index + 1]  # the schedule's bound
        rows_out = current.rows
        if current.max_length > 1:
            rows_out = min(current.rows, current.rows // stride + capacity[0])
        pool_capacity, layout_capacity = (current.rows, rows_out, longest), (rows_out, longest)
    pool = PoolPlan(current.lengths, kernel, stride, arrays, pool_capacity, parts)
    pool.centre_key = arrays.add(pool.centre_index, capacity and pool.total_out)
    return pool, SequenceLayout(pool.out_lengths, arrays, padded, layout_capacity)


__all__ = ["TitePlan", "LayerPlan", "SequenceLayout", "opening_layers"]
