"""TITE (Schlatt et al., "TITE: Token-Independent Text Encoder", SIGIR 2025): transformer layers that
pool a text down to one vector.

Read top to bottom: embeddings, attention (with pre / intra / post pooling, Fig. 2), the layer, the
pre-trained base class, :class:`TiteModel`, and pre-training (:class:`TiteForPreTraining`).

Sequences are unpadded ONCE into a packed ``(tokens, width)`` tensor and stay packed through every
layer. Everything the pooling schedule determines for a batch (each layer's ``cu_seqlens`` and
max lengths, pooling windows, rotary rows, padding indices) is computed once per forward on the
host from the attention mask and moved to the device in one transfer (``plan_tite.TitePlan``), so
the layers never wait for the device. Attention runs on the packed rows directly (PyTorch's varlen
flash attention on CUDA in fp16/bf16, or FlashAttention-2 varlen) or regroups them per sequence
inside the call (padded eager / sdpa: CPU, fp32). Inference on CUDA runs each residual + LayerNorm as one
kernel and a bf16 feed-forward's GELU in its product's epilogue (``fused_tite``); with ``config.cuda_graphs`` it
replays the layers as CUDA graphs (``cuda_graphs_tite``).

Shipped as remote code next to every checkpoint: imports ``torch`` and ``transformers``
absolutely, its sibling files relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import ModelOutput, logging

from .configuration_tite import TiteConfig
from .cuda_graphs_tite import CudaGraphs
from .fused_tite import linear_gelu, plain_module, residual_layer_norm
from .padded_tite import exporting, padded_forward
from .plan_tite import LayerPlan, TitePlan
from .pooling_tite import pool_planned
from .rotary_tite import apply_rotary, fused_rotary_available
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

# dense-encoders release that wrote this file
DENSE_ENCODERS_CODE_VERSION = "0.1.0"


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


@functools.cache
def _flash_capable(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 0)  # FlashAttention-2 needs sm80+


def varlen_attention_available(device: torch.device, dtype: torch.dtype, dropout: float = 0.0) -> bool:
    """Whether PyTorch's varlen flash attention runs on tensors of ``device`` and ``dtype`` with attention
    ``dropout``: CUDA sm80+, fp16/bf16, and, for dropout, the direct operator (``varlen_attn`` takes none).
    A plan prepares packed attention when it holds; a layer checks it again for the queries it attends."""
    if (varlen_attn is None and _flash_attention_forward is None) or device.type != "cuda":
        return False
    if dropout > 0.0 and _flash_attention_forward is None:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return dtype in (torch.float16, torch.bfloat16) and _flash_capable(index)


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


def eager_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Plain softmax attention; ``query`` ``(batch, heads, len_q, dim)``, boolean ``attention_mask`` keeps keys."""
    scores = (query @ key.transpose(-1, -2)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    probabilities = F.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return (probabilities @ value).transpose(1, 2), probabilities


def attention_function(implementation: str):
    """transformers' attention function registered as ``implementation`` (``"sdpa"``, ``"flash_attention_2"``, a
    registered kernel), :func:`eager_attention_forward` for ``"eager"``: ``get_interface`` of transformers 5, the
    registry's mapping itself on transformers 4."""
    lookup = getattr(ALL_ATTENTION_FUNCTIONS, "get_interface", ALL_ATTENTION_FUNCTIONS.get)
    return lookup(implementation, eager_attention_forward)


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

    def _project(self, names: tuple[str, ...], states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``getattr(self, name)(states)`` for each of ``names`` (e.g. query, key, value) as ONE matrix product
        with the weights concatenated on the output axis; returns ``(rows, width)`` views.

        One GEMM instead of two or three: fewer launches and host dispatches per layer, and in the backward one
        GEMM per gradient instead of one per projection plus the sums. The weights are concatenated in every call
        (a copy of them: microseconds on a GPU, and on the CPU still faster than three products) and never kept:
        no cache could see every change of the weights (an edit through ``.data``, as a PEFT merge or
        ``load_state_dict`` makes it, leaves no trace on the parameter), and old weights would give wrong vectors
        silently. Projections replaced or hooked (adapters, quantised layers) run one by one.
        """
        modules = [getattr(self, name) for name in names]
        if any(not plain_module(module, nn.Linear) or module.bias is None for module in modules):
            return tuple(module(states) for module in modules)
        weights = torch.cat([module.weight for module in modules])
        biases = torch.cat([module.bias for module in modules])
        return F.linear(states, weights, biases).split([module.out_features for module in modules], dim=-1)

    def forward(self, states: torch.Tensor, plan: LayerPlan, output_attentions: bool = False):
        """``states`` ``(plan.key.rows or pool input rows, in_width)`` -> ``(plan.output.rows, width)``; with
        ``output_attentions``, also the attention probabilities ``(batch, heads, query length, key length)``."""
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
            probabilities = None
            if output_attentions:  # at the lengths hidden_states are returned at (the input's, before pooling)
                probabilities = F.pad(attended.new_ones(plan.query.batch_size, self.heads, 1, 1),
                                      (0, plan.key.returned_length - 1, 0, plan.query.returned_length - 1))
            if torch.is_grad_enabled():
                # Q and K still get their exact gradient, zero, through a zero tied to them: every parameter is in
                # every backward, as DDP without unused-parameter detection (gradient checkpointing) waits for
                skipped = [p for p in (*self.query.parameters(), *self.key.parameters()) if p.requires_grad]
                if skipped:
                    attended = attended + 0.0 * torch.stack([p.sum() for p in skipped]).sum().to(attended.dtype)
        else:
            if query_states is key_states:  # no pooling here, or pre pooling: one product for Q, K and V
                query, key, value = self._project(("query", "key", "value"), key_states)
            else:  # intra pooling: pooled queries, full-length keys and values
                query = self.query(query_states)
                key, value = self._project(("key", "value"), key_states)
            attended = self._attend(
                query.view(-1, self.heads, head_dim), key.view(-1, self.heads, head_dim),
                value.view(-1, self.heads, head_dim), plan, output_attentions,
            )
            if output_attentions:
                attended, probabilities = attended
        projected = self.dropout(self.dense(attended.reshape(-1, self.width)))
        if plan.location == "post":  # after the residual connection, before the normalisation
            hidden = self.LayerNorm(pool_planned(projected + residual, plan.pool, self.config.pooling_implementation))
        else:
            hidden = residual_layer_norm(projected, residual, self.LayerNorm)
        return (hidden, probabilities) if output_attentions else hidden

    def _attend(self, query, key, value, plan: LayerPlan, output_attentions: bool = False):
        """RoPE on the projected ``(rows, heads, head_dim)`` queries and keys (integer key positions,
        window-centre query positions), then attention of the packed rows, dispatched by
        ``config._attn_implementation`` through transformers' attention registry (eager / sdpa /
        flash_attention_2 / ...). ``sdpa`` means PyTorch's own kernels: varlen flash attention on the
        packed rows where it applies (CUDA, fp16/bf16), padded ``scaled_dot_product_attention`` elsewhere.
        ``output_attentions``: the padded eager computation, whatever the implementation (only it has the
        probabilities), returning ``(output rows, probabilities (batch, heads, query length, key length))``, each
        axis at the length its layout's hidden states are returned at (``SequenceLayout.returned_length``: the
        input's, before the first pooling), so that the output is computed from the returned weights."""
        head_dim = self.width // self.heads
        if plan.rotary_key_index is not None:
            query, key = apply_rotary(
                query, key, plan.rotary_query_index, plan.rotary_key_index, self.config.rope_theta,
                plan.rotary_query, plan.rotary_key,
            )
        implementation = self.config._attn_implementation or "sdpa"
        dropout = self.config.attention_probs_dropout_prob if self.training else 0.0
        scaling = head_dim**-0.5
        if output_attentions:
            implementation, attention = "eager", eager_attention_forward
        elif implementation == "sdpa" and plan.varlen and varlen_attention_available(query.device, query.dtype,
                                                                                     dropout):
            return packed_flash_attention(query, key, value, plan.query, plan.key, dropout, scaling)
        else:
            attention = attention_function(implementation)
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
        if output_attentions:  # the weights at the returned lengths; padded keys get none
            output, probabilities = attention(
                self,
                plan.query.pad_returned(query).transpose(1, 2),
                plan.key.pad_returned(key).transpose(1, 2),
                plan.key.pad_returned(value).transpose(1, 2),
                plan.key.returned_key_mask(query.device),
                dropout=dropout,
                scaling=scaling,
            )
            return plan.query.unpad_returned(output), probabilities
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
        self.hidden_act = config.hidden_act
        self.output = nn.Linear(config.intermediate_sizes[layer_index], width)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)

    def forward(self, states: torch.Tensor, plan: LayerPlan, output_attentions: bool = False):
        """The layer's output rows; with ``output_attentions``, and its attention probabilities."""
        if output_attentions:
            attended, probabilities = self.attention(states, plan, output_attentions=True)
        else:
            attended = self.attention(states, plan)
        activated = linear_gelu(attended, self.intermediate, self.activation, self.hidden_act)
        hidden = residual_layer_norm(self.dropout(self.output(activated)), attended, self.LayerNorm)
        return (hidden, probabilities) if output_attentions else hidden


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
        """The text's single vector (position 0 of ``last_hidden_state``), compared by dot product; the mean
        over the token states for a TITE without pooling layers whose ``output_pooling`` is "mean"."""
        if not config.pools_to_one_vector and getattr(config, "output_pooling", "first") == "mean":
            return "mean", "dot"
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


@dataclass
class TiteModelOutput(ModelOutput):
    """Output of :class:`TiteModel`: transformers' ``BaseModelOutputWithPooling`` fields, each layer's hidden
    states at that layer's length (as transformers' Funnel Transformer gives an encoder that pools between layers),
    and the masks that go with them.

    Args:
        last_hidden_state: ``(batch, 1, hidden)`` the text's vector, or, without pooling layers, the token states
            at the input's length ``(batch, input_ids.shape[1], hidden)``, as BERT's (each text's rows first, then
            zero rows); through the projection, if the model has one.
        pooler_output: ``(batch, hidden)`` the text's vector.
        hidden_states: with ``output_hidden_states``, the embeddings' output and then every layer's output
            (``num_hidden_layers + 1`` entries, before any projection), entry ``i`` ``(batch, length, width of
            that layer)``: each text's rows first (whichever side the input was padded on), then zero rows. Up to
            the first pooling the length is the input's (``input_ids.shape[1]``), as BERT's and Funnel's are: for
            texts padded on the right (tokenizers' default) a row sits at its token's position, so the input's
            ``attention_mask`` applies to it. From the first pooling on it is the longest text's length at that
            layer (the pooled lengths of the batch's real texts). Entries not selected by indices in
            ``output_hidden_states`` are None.
        hidden_states_masks: ``(batch, length)`` 1 at the real rows of the ``hidden_states`` entry of the same
            index, 0 at its padding (as an ``attention_mask``).
        attentions: with ``output_attentions``, every layer's attention probabilities ``(batch, heads, query
            length, key length)``, from the eager implementation. Entry ``i`` is layer ``i``'s, whose input is
            ``hidden_states[i]``: its queries and keys are those rows (``hidden_states_masks[i]``, at that entry's
            length; padded keys get no weight); a layer that pools has the pooled rows of
            ``hidden_states[i + 1]`` as queries under "intra" pooling, as queries and keys under "pre" pooling.
    """

    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor | None, ...] | None = None
    hidden_states_masks: tuple[torch.LongTensor | None, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def _hidden_states_kept(output_hidden_states, count: int) -> set[int] | None:
    """The indices of the hidden states ``output_hidden_states`` asks for, of ``count``: all for True, the given
    ones (negative from the end; out of range: none) for an int or a list, as transformers reads the argument;
    None when it asks for none."""
    if not output_hidden_states:
        return None
    if isinstance(output_hidden_states, bool):
        return set(range(count))
    selected = [output_hidden_states] if isinstance(output_hidden_states, int) else list(output_hidden_states)
    return {index % count for index in selected if -count <= index < count}


@torch.compiler.disable
def _planned_outside_graph(model, input_ids, attention_mask, token_type_ids, return_dict, output_attentions,
                           output_hidden_states):
    """``model``'s planned forward run eagerly, outside a ``torch.compile`` graph (a graph break): what a compiled
    TITE does for the calls that record hidden states or attentions (the traceable path gives neither)."""
    return model(input_ids, attention_mask, token_type_ids, return_dict=return_dict,
                 output_attentions=output_attentions, output_hidden_states=output_hidden_states)


class TiteModel(TitePreTrainedModel):
    """The TITE encoder: one vector per text.

    ``pooler_output`` ``(batch, hidden)`` is the text's vector and ``last_hidden_state``
    ``(batch, 1, hidden)`` the same vector as a length-1 sequence. A configuration without pooling
    returns the padded token states instead and, as ``pooler_output``, its first token's state or, with
    ``config.output_pooling="mean"``, the mean over the text's tokens. With ``config.projection_size`` both
    pass through one linear layer (``projection``), as a Lightning IR bi-encoder's output does (the mean of
    projected states is the projection of the mean: the layer is affine). With ``config.empty_texts="zeros"``
    a text without tokens gets zero states before the projection, as the TITE authors' code gives them.
    ``output_hidden_states`` / ``output_attentions`` add every layer's states, each at its own length with the
    mask of its real rows, and attention weights (:class:`TiteModelOutput`).
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

    @property
    def host_attention_mask(self) -> bool:
        """Whether a pipeline may hand this model its attention mask on the host, with the other inputs on the
        device (``dense_encoders``' encoding loop reads it): the forward then plans the batch from the host mask and
        reads nothing from the device, so the host can queue the next batch while the device computes. True when
        the schedule pools every text to one vector: the output then has one row per text and nothing downstream
        (sentence-transformers' pooling) needs the mask on the device."""
        return any(kernel is not None for kernel in self.config.kernel_sizes)

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
        if input_ids.dim() == 2 and input_ids.shape[1] == 0 and input_ids.shape[0]:
            raise ValueError(f"Every text of the batch is empty (input_ids of shape {tuple(input_ids.shape)}): "
                             "this model gives no vector for an empty text; drop empty texts first (each needs at "
                             "least one token).")
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(
                f"input_ids must be (batch, length) with at least one token, got shape {tuple(input_ids.shape)}."
            )
        device = input_ids.device
        dtype = self._compute_dtype(device)
        dropout = self.config.attention_probs_dropout_prob if self.training else 0.0
        varlen = (self.config._attn_implementation or "sdpa") == "sdpa" and varlen_attention_available(
            device, dtype, dropout)
        return TitePlan(self.config, attention_mask, tuple(input_ids.shape), device, varlen, dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | int | list[int] | None = None,
    ) -> TiteModelOutput | tuple:
        """``attention_mask`` may be a CPU tensor while ``input_ids`` is on the GPU: then the forward
        reads nothing from the device; otherwise it reads the mask once (the plan).

        ``return_dict``, ``output_attentions`` and ``output_hidden_states`` default to the config's, as in
        transformers; ``output_hidden_states`` may also be indices of the hidden states to keep (the others are
        None). See :class:`TiteModelOutput` for what they give."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        hidden_kept = _hidden_states_kept(
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states,
            self.config.num_hidden_layers + 1)
        recording = bool(output_attentions) or hidden_kept is not None
        # torch.export, torch.onnx.export, torch.jit.trace, torch.compile: the traceable path (padded_tite), one graph
        if exporting() or torch.compiler.is_compiling():
            if recording and not exporting():  # compiled: the planned path records, run outside the graph
                return _planned_outside_graph(self, input_ids, attention_mask, token_type_ids, return_dict,
                                              output_attentions, output_hidden_states)
            if recording:
                raise ValueError("output_hidden_states / output_attentions are not given by an exported TITE (its "
                                 "traced path returns last_hidden_state and pooler_output); export without them.")
            output = padded_forward(self, input_ids, attention_mask, token_type_ids)  # transformers' output class
            return output.to_tuple() if return_dict is False else output
        if getattr(self.config, "empty_texts", "error") == "zeros" and attention_mask is not None:
            empty = ~attention_mask.bool().any(-1)
            if bool(empty.any()):
                if recording:
                    raise ValueError(
                        "output_hidden_states / output_attentions are not given for a batch with empty texts "
                        "(empty_texts='zeros'): an empty text has no states in any layer; ask for them on the "
                        "texts with tokens only.")
                return self._forward_with_empty_texts(input_ids, attention_mask, token_type_ids, empty, return_dict)
        if not recording and self._graphs_apply(input_ids):
            vectors = self._graphed_forward(input_ids, attention_mask, token_type_ids)
            if self.projection is not None:
                vectors = self.projection(vectors)
            output = TiteModelOutput(last_hidden_state=vectors[:, None], pooler_output=vectors)
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
        recorded = {}
        if recording:
            if output_attentions and (self.config._attn_implementation or "sdpa") != "eager":
                logger.warning_once("output_attentions=True: attention runs in the eager implementation for such "
                                    "calls (only it gives the weights); load with attn_implementation='eager' to "
                                    "say so.")
            states, recorded = self._layers_recording(states, plan, hidden_kept, bool(output_attentions))
        else:  # plan.layer(i): a staged plan plans the pooled layers while the device runs the opening ones
            for index, layer in enumerate(self.layers):
                states = layer(states, plan.layer(index))
        if self.projection is not None:
            states = self.projection(states)
        if plan.pools:
            vectors = states  # every text is one vector now: (batch, hidden)
            output = TiteModelOutput(last_hidden_state=vectors[:, None], pooler_output=vectors, **recorded)
        else:  # token states at the input's length, as BERT's (zeros past the longest text)
            padded = plan.output.pad_returned(states)
            if getattr(self.config, "output_pooling", "first") == "mean":  # padded positions are zeros
                lengths = torch.as_tensor(plan.output.lengths, device=padded.device, dtype=padded.dtype)
                vectors = padded.sum(1) / lengths[:, None]
            else:
                vectors = padded[:, 0]
            output = TiteModelOutput(last_hidden_state=padded, pooler_output=vectors, **recorded)
        return output.to_tuple() if return_dict is False else output

    def _layers_recording(self, states: torch.Tensor, plan: TitePlan, hidden_kept: set[int] | None,
                          output_attentions: bool) -> tuple[torch.Tensor, dict]:
        """The layers on the embeddings' packed ``states``, recording the hidden states whose indices are in
        ``hidden_kept`` (0: the embeddings' output, i: layer i's) and, with ``output_attentions``, each layer's
        attention probabilities (eager). Returns the last layer's rows and :class:`TiteModelOutput`'s fields.

        Each kept hidden state is padded to its layer's length and the layers go on from it (unpadded again:
        the same rows), so gradients reach it as they reach BERT's. The plan trims the input to its longest text;
        the states of the input's layout (every layer before the first pooling) are padded with zeros back to the
        input's length (``SequenceLayout.returned_length``), as BERT returns them, and so are the attention
        weights' axes over it. Only this recording path pads: a forward without them computes on the trimmed
        rows alone."""
        layouts = [plan.input] + [layer_plan.output for layer_plan in plan.layers]
        hidden_states, masks, attentions = [], [], []

        def record(index: int, rows: torch.Tensor) -> torch.Tensor:
            if hidden_kept is None:
                return rows
            if index not in hidden_kept:
                hidden_states.append(None)
                masks.append(None)
                return rows
            layout = layouts[index]
            layout.ensure_padding(rows.device)
            padded = layout.pad_returned(rows)
            lengths = torch.as_tensor(layout.lengths, device=rows.device)
            hidden_states.append(padded)
            masks.append((torch.arange(padded.shape[1], device=rows.device) < lengths[:, None]).long())
            return layout.unpad_returned(padded)

        states = record(0, states)
        for index, (layer, layer_plan) in enumerate(zip(self.layers, plan.layers), start=1):
            if output_attentions:
                states, probabilities = layer(states, layer_plan, output_attentions=True)
                attentions.append(probabilities)
            else:
                states = layer(states, layer_plan)
            states = record(index, states)
        recorded = {"attentions": tuple(attentions)} if output_attentions else {}
        if hidden_kept is not None:
            recorded.update(hidden_states=tuple(hidden_states), hidden_states_masks=tuple(masks))
        return states, recorded

    def _forward_with_empty_texts(self, input_ids, attention_mask, token_type_ids, empty, return_dict):
        """``config.empty_texts="zeros"``: the texts with tokens through the layers, each empty text one zero
        state (through the projection) at position 0, as the TITE authors' code outputs an empty input."""
        width = self.config.sentence_embedding_dimension
        zero = self.embeddings.word_embeddings.weight.new_zeros(1, self.config.hidden_size)
        empty_state = (self.projection(zero) if self.projection is not None else zero)[0]
        filled = ~empty.to(input_ids.device)
        if bool(filled.any()):
            rows = filled.nonzero().squeeze(1)
            kept = self(input_ids.index_select(0, rows),
                        attention_mask=attention_mask[filled.to(attention_mask.device)],
                        token_type_ids=None if token_type_ids is None else token_type_ids.index_select(0, rows),
                        return_dict=True)
            states = kept.last_hidden_state
        else:
            rows, states = None, empty_state.new_zeros(0, 1, width)
        hidden = empty_state.new_zeros(input_ids.shape[0], max(states.shape[1], 1), width)
        if rows is not None:
            hidden[rows, : states.shape[1]] = states
        hidden[empty.to(hidden.device), 0] = empty_state
        vectors = hidden[:, 0]
        if rows is not None:
            vectors = vectors.index_put((rows,), kept.pooler_output)
        output = TiteModelOutput(last_hidden_state=hidden, pooler_output=vectors)
        return output.to_tuple() if return_dict is False else output

    # ---------------------------------------------------------------- CUDA graphs (inference)

    def _graphs_apply(self, input_ids: torch.Tensor) -> bool:
        """Whether this forward replays a CUDA graph: ``config.cuda_graphs``, inference on CUDA, and every
        layer on packed rows (pooling, sdpa with varlen flash attention, fused rotary, Triton pooling)."""
        if not getattr(self.config, "cuda_graphs", False) or not input_ids.is_cuda or self.training:
            return False
        if torch.is_grad_enabled() or torch.cuda.is_current_stream_capturing():
            return False
        dtype = self._compute_dtype(input_ids.device)
        return (
            any(kernel is not None for kernel in self.config.kernel_sizes)
            and (self.config._attn_implementation or "sdpa") == "sdpa"
            and varlen_attention_available(input_ids.device, dtype)
            and fused_rotary_available(input_ids.device, dtype)
            and self.config.pooling_implementation != "torch"
        )

    def _graphed_forward(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        """The layers as a replay of the batch's bucket graph (:class:`CudaGraphs`, kept on the model)."""
        graphs = self.__dict__.setdefault("_cuda_graphs", CudaGraphs())
        return graphs.run(self, input_ids, attention_mask, token_type_ids, self._compute_dtype(input_ids.device))


# --------------------------------------------------------------------------------------------
# Pre-training: enhanced masked auto-encoding + bag-of-words (paper Sec. 3.3)
# --------------------------------------------------------------------------------------------


# seed of the decoder mask TiteForPreTraining draws in eval(): evaluation losses are reproducible
EVAL_DECODER_MASK_SEED = 0


@dataclass
class TiteForPreTrainingOutput(ModelOutput):
    """Output of :class:`TiteForPreTraining`.

    Args:
        loss: ``mae_loss + bow_loss`` (unweighted, as in the paper).
        mae_loss: enhanced masked auto-encoding cross-entropy over the non-special tokens.
        bow_loss: bag-of-words binary cross-entropy over the vocabulary.
        pooler_output: ``(batch, hidden)`` the text vectors.
        hidden_states, hidden_states_masks, attentions: the encoder's, as in :class:`TiteModelOutput`.
    """

    loss: torch.FloatTensor | None = None
    mae_loss: torch.FloatTensor | None = None
    bow_loss: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor | None, ...] | None = None
    hidden_states_masks: tuple[torch.LongTensor | None, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


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

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.mae_head.decoder = new_embeddings

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """transformers' resize of the word table and the MAE decoder (the output embeddings), and the
        bag-of-words decoder with them: tied, it is tied again to the new table (bias cut or zero-padded, as
        transformers does for a tied decoder); untied, its rows are kept and new rows initialised as in a new
        model."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        vocab_size, decoder = embeddings.weight.shape[0], self.bow_head.decoder
        decoder.out_features = decoder.weight.shape[0]  # re-tied to the new table: its size, not the old one
        if decoder.weight.shape[0] != vocab_size:
            resized = nn.Linear(decoder.in_features, vocab_size, bias=decoder.bias is not None,
                                device=decoder.weight.device, dtype=decoder.weight.dtype)
            self._init_weights(resized)
            kept = min(vocab_size, decoder.weight.shape[0])
            with torch.no_grad():
                resized.weight[:kept] = decoder.weight[:kept]
                if decoder.bias is not None:
                    resized.bias[:kept] = decoder.bias[:kept]
            resized.requires_grad_(decoder.weight.requires_grad)
            self.bow_head.decoder = resized
        return embeddings

    def decoder_visibility(self, attention_mask: torch.Tensor,
                           generator: torch.Generator | None = None) -> torch.Tensor:
        """Random (batch, query, key) visibility: p = 1 - decoder_mask_probability, own position and padding hidden.
        ``generator``: where the randomness comes from (default: the global generator)."""
        batch, length = attention_mask.shape
        visible = torch.rand(batch, length, length, device=attention_mask.device,
                             generator=generator) >= self.decoder_mask_probability
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
        output_attentions: bool | None = None,
        output_hidden_states: bool | int | list[int] | None = None,
    ) -> TiteForPreTrainingOutput | tuple:
        """Targets are the ORIGINAL tokens: ``input_ids``, or ``labels`` where the collator masked inputs.

        Args:
            special_tokens_mask: 1 at special tokens (excluded from both losses); by default the first
                and last real token of each text ([CLS] / [SEP]).
            decoder_visibility: (batch, len, len) boolean keys visible per query; when omitted, sampled afresh
                in training, and in ``eval()`` drawn from a fixed seed, so that the same batch gives the same loss.
            return_dict, output_attentions, output_hidden_states: as for :class:`TiteModel` (the encoder's);
                the tuple of ``return_dict=False`` starts with the loss.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        encoded = self.tite(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True,
                            output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        vectors = encoded.pooler_output
        original = input_ids if labels is None else torch.where(labels != -100, labels, input_ids)
        real = attention_mask.bool()
        if special_tokens_mask is None:
            lengths = attention_mask.sum(-1)
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
            special_tokens_mask = (positions == 0) | (positions == (lengths - 1)[:, None])
        targets = real & ~special_tokens_mask.bool()
        if decoder_visibility is None:
            generator = None
            if not self.training:  # evaluation: the same mask for the same batch shape, the global RNG untouched
                generator = torch.Generator(attention_mask.device).manual_seed(EVAL_DECODER_MASK_SEED)
            decoder_visibility = self.decoder_visibility(attention_mask, generator)
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
            loss=mae_loss + bow_loss, mae_loss=mae_loss, bow_loss=bow_loss, pooler_output=vectors,
            hidden_states=encoded.hidden_states, hidden_states_masks=encoded.hidden_states_masks,
            attentions=encoded.attentions,
        )
        return output.to_tuple() if return_dict is False else output


TiteModel.register_for_auto_class("AutoModel")
TiteForPreTraining.register_for_auto_class("AutoModelForPreTraining")

__all__ = [
    "TitePreTrainedModel",
    "TiteModel",
    "TiteForPreTraining",
    "TiteForPreTrainingOutput",
    "TiteModelOutput",
    "varlen_attention_available",
]
