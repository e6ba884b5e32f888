"""TITE's exportable forward: the encoder on a padded grid, every index computed from the mask by tensor ops.

The default forward (``modeling_tite.TiteModel.forward``) reads the attention mask on the host once
(``plan_tite.TitePlan``) and runs the layers on packed rows; that host read is what makes it fast, and
what a tracer cannot follow (``torch.export`` and ``torch.onnx.export(..., dynamo=True)`` stop at it).
:func:`padded_forward` computes the same vectors with tensor operations only, so the traced graph holds
for every batch size and length:

* each text's real tokens move to the left of its row (any padding side in), at positions ``0 .. n-1``;
* every layer keeps a ``(batch, length, width)`` grid whose length follows from the input's ``L`` alone:
  after pooling layers of strides ``s1 .. sj`` (TITE Eq. 1, pool_{k,s}), ``ceil(L / (s1 ... sj)) + 1`` windows,
  window ``i`` the mean of its text's real tokens in ``[i*s, i*s + k)``; each text's own count follows
  ``configuration_tite.pooled_length`` and the windows past it are padding (zeros);
* attention (PyTorch's ``scaled_dot_product_attention``) masks the padded keys; RoPE rows are computed
  from the positions (keys at ``p``, intra-pooled queries at their windows' centres), as the table holds them.

``TiteModel.forward`` takes this path while it is traced for export (:func:`exporting`) and while ``torch.compile``
traces it (``torch.compiler.is_compiling()``: one graph, whose dynamic shapes hold for every batch).
A traced graph checks nothing on the data: texts must have at least one token and at most
``max_position_embeddings`` (give ``torch.export.Dim("length", max=config.max_position_embeddings)``).

Shipped as remote code next to every checkpoint: imports ``torch`` and ``transformers`` absolutely, its sibling files
relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_tite import pooled_length
from .rotary_tite import apply_rotary_rows, rotary_rows


def exporting() -> bool:
    """Whether a tracer records this call for export: ``torch.export`` (also under ``torch.onnx.export(...,
    dynamo=True)``; ``torch.compiler.is_exporting()``, where this torch has it) or ``torch.jit.trace`` (the
    legacy ``torch.onnx.export(..., dynamo=False)``)."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting is not None and is_exporting()) or torch.jit.is_tracing()


def left_aligned(attention_mask: torch.Tensor, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """``tensors`` ``(batch, length)`` with each row's real tokens (``attention_mask`` non-zero) moved to its
    start, in order, and its padding after them: one scatter, the identity for right-padded rows."""
    mask = attention_mask != 0
    length = mask.shape[1]
    real_up_to = mask.long().cumsum(1)  # real tokens up to and including each column
    columns = torch.arange(length, device=mask.device)[None, :]
    destination = torch.where(mask, real_up_to - 1, real_up_to[:, -1:] + columns - real_up_to)
    return [None if tensor is None else torch.zeros_like(tensor).scatter(1, destination, tensor)
            for tensor in tensors]


def pool_padded(states: torch.Tensor, lengths: torch.Tensor, kernel: int, stride: int, windows):
    """TITE Eq. 1 (pool_{k,s}) on a left-aligned ``(batch, length, width)`` grid of texts of ``lengths`` rows:
    ``(batch, windows, width)`` window means (padding windows 0) and the pooled lengths. ``windows`` must be
    at least ``ceil(max(lengths) / stride)`` (every text's pooled length, Eq. 1, for ``stride <= kernel``)."""
    length = states.shape[1]
    out_lengths = pooled_length(lengths, kernel, stride)
    window = torch.arange(windows, device=states.device)
    rows = window[:, None] * stride + torch.arange(kernel, device=states.device)[None, :]  # (windows, kernel)
    inside = (rows[None] < lengths[:, None, None]) & (window[None, :, None] < out_lengths[:, None, None])
    source = states.float() if states.dtype in (torch.float16, torch.bfloat16) else states  # accumulate in fp32
    gathered = source[:, rows.clamp(max=length - 1)]  # (batch, windows, kernel, width)
    total = torch.where(inside[..., None], gathered, 0).sum(2)
    pooled = total / inside.sum(-1).clamp(min=1)[..., None].to(total.dtype)
    return pooled.to(states.dtype), out_lengths


def _attention(attention, states: torch.Tensor, lengths: torch.Tensor, windows, config, dropout: float):
    """One ``TiteAttention`` (its weights; Fig. 2: pre / intra / post pooling into ``windows`` rows) on the
    padded grid; returns the normalised output and its lengths. The packed counterpart is ``TiteAttention.forward``."""
    location = config.pooling_location if attention.kernel_size is not None else None
    key_states, key_lengths = states, lengths
    query_states, query_lengths = states, lengths
    if location in ("pre", "intra"):
        query_states, query_lengths = pool_padded(states, lengths, attention.kernel_size, attention.stride, windows)
        if location == "pre":  # attention over the pooled sequence only
            key_states, key_lengths = query_states, query_lengths
    residual = query_states
    if attention.width != attention.in_width:  # upscaling: zero-pad the residual on the feature axis
        residual = F.pad(query_states, (0, attention.width - attention.in_width))
    batch, query_length, key_length = states.shape[0], query_states.shape[1], key_states.shape[1]
    heads, head_dim = attention.heads, attention.width // attention.heads
    query = attention.query(query_states).view(batch, query_length, heads, head_dim)
    key = attention.key(key_states).view(batch, key_length, heads, head_dim)
    value = attention.value(key_states).view(batch, key_length, heads, head_dim)
    if config.rotary_positions:  # half units: key rows at 2p, intra-pooled queries at their windows' centres
        table_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
        key_index = 2 * torch.arange(key_length, device=states.device)
        query_index = key_index
        if location == "intra":
            kernel, stride = attention.kernel_size, attention.stride
            query_index = 2 * stride * torch.arange(query_length, device=states.device) + (kernel - 1)
        query = apply_rotary_rows(query, rotary_rows(query_index, head_dim, config.rope_theta, table_dtype))
        key = apply_rotary_rows(key, rotary_rows(key_index, head_dim, config.rope_theta, table_dtype))
    keys = torch.arange(key_length, device=states.device)[None, :] < key_lengths[:, None]
    attended = F.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=keys[:, None, None, :],
        dropout_p=dropout, scale=head_dim**-0.5,
    ).transpose(1, 2).reshape(batch, query_length, attention.width)
    hidden = attention.dropout(attention.dense(attended)) + residual
    if location == "post":  # after the residual connection, before the normalisation
        hidden, query_lengths = pool_padded(hidden, query_lengths, attention.kernel_size, attention.stride, windows)
    return attention.LayerNorm(hidden), query_lengths


def padded_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> BaseModelOutputWithPooling:
    """``model`` (a ``TiteModel``)'s ``last_hidden_state`` and ``pooler_output`` by tensor ops only (traceable).

    A TITE that pools gives each text's vector, ``(batch, 1, hidden)`` and ``(batch, hidden)``; one without
    pooling gives the token states on the input's grid, ``(batch, length, hidden)``, zeros at padding, and
    their first or mean (``config.output_pooling``). ``config.empty_texts="zeros"`` is honoured; with
    ``"error"`` an empty text's vector is undefined (nothing is refused inside a traced graph).

    The output is transformers' ``BaseModelOutputWithPooling``: a saved program names its output's class, and
    loading it then needs transformers (``import transformers.modeling_outputs`` before ``torch.export.load``),
    not this code; a program exported with ``return_dict=False`` returns a plain tuple."""
    config = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if model.embeddings.token_type_embeddings is None:
        token_type_ids = None  # no token-type table (the default): nothing to read
    input_ids, token_type_ids = left_aligned(attention_mask, input_ids, token_type_ids)
    lengths = (attention_mask != 0).sum(1)
    empty = lengths == 0
    lengths = lengths.clamp(min=1)  # an empty text is computed as one token, then replaced (empty_texts)
    # padding rows past the position table (a batch padded beyond max_position_embeddings) read its last row
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).clamp(max=config.max_position_embeddings - 1)
    states = model.embeddings(input_ids, positions, token_type_ids)
    dropout = config.attention_probs_dropout_prob if model.training else 0.0
    reduction, windows = 1, None
    for layer in model.layers:  # TiteLayer.forward: attention (with pooling), then the feed-forward block
        if layer.attention.kernel_size is not None:
            # a text of n <= L tokens pools to at most ceil(n / s1 / s2 ...) = ceil(n / (s1 s2 ...)) windows (Eq. 1,
            # s <= k): each grid follows from the input length L in ONE division (a traced graph's shape arithmetic
            # stays flat), with a spare padding window, so that no grid is one row whatever L
            reduction *= layer.attention.stride
            windows = (input_ids.shape[1] + reduction - 1) // reduction + 1
        attended, lengths = _attention(layer.attention, states, lengths, windows, config, dropout)
        states = layer.LayerNorm(layer.dropout(layer.output(layer.activation(layer.intermediate(attended))))
                                 + attended)
    if model.projection is not None:
        states = model.projection(states)
    if config.empty_texts == "zeros":  # as TiteModel._forward_with_empty_texts: zero states before the projection
        zero = model.embeddings.word_embeddings.weight.new_zeros(1, config.hidden_size)
        empty_state = (model.projection(zero) if model.projection is not None else zero)[0].to(states.dtype)
    if config.pools_to_one_vector:  # every text is one vector now, in the grid's first row
        vectors = states[:, 0]
        if config.empty_texts == "zeros":
            vectors = torch.where(empty[:, None], empty_state, vectors)
        return BaseModelOutputWithPooling(last_hidden_state=vectors[:, None], pooler_output=vectors)
    rows = torch.arange(states.shape[1], device=states.device)[None, :, None]
    padded = torch.where((rows < lengths[:, None, None]) & ~empty[:, None, None], states, 0)  # zeros at padding
    if config.empty_texts == "zeros":
        padded = torch.where(empty[:, None, None] & (rows == 0), empty_state, padded)
    vectors = padded.sum(1) / lengths[:, None].to(padded.dtype) if config.output_pooling == "mean" else padded[:, 0]
    return BaseModelOutputWithPooling(last_hidden_state=padded, pooler_output=vectors)


__all__ = ["exporting", "left_aligned", "padded_forward", "pool_padded"]
