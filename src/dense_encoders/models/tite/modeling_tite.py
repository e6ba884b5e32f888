"""TITE (Schlatt et al., SIGIR 2025): transformer layers that pool a text down to one vector.

Read top to bottom: packing helpers, rotary positions, embeddings, attention (with pre / intra /
post pooling), the layer, the pre-trained base class and :class:`TiteModel`.

Sequences are unpadded ONCE into a packed ``(tokens, width)`` tensor with cumulative lengths
(``cu_seqlens``) and stay packed through every layer; lengths are recomputed after each pooling.
Attention regroups the packed rows per sequence only inside the attention call (eager / sdpa) or
runs on the packed rows directly (FlashAttention-2 varlen).

Shipped as remote code next to every checkpoint: imports ``torch`` and ``transformers``
absolutely, its sibling files relatively, nothing from ``dense_encoders``.
"""

from __future__ import annotations

from dataclasses import dataclass


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
from .pooling_tite import pool_packed, window_centres

logger = logging.get_logger(__name__)

# dense-encoders release that wrote this file (checked by dense_encoders.hub.check_remote_code)
DENSE_ENCODERS_CODE_VERSION = "0.1.0"


# --------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------


def cu_seqlens_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """[batch] lengths -> [batch + 1] cumulative lengths (int32, starting at 0)."""
    return F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))


def packed_positions(cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For every packed row: (its sequence index, its position inside the sequence)."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    batch_index = torch.repeat_interleave(torch.arange(lengths.numel(), device=cu_seqlens.device), lengths)
    position = torch.arange(int(cu_seqlens[-1]), device=cu_seqlens.device) - cu_seqlens[:-1].long()[batch_index]
    return batch_index, position


class PackedLayout:
    """Where the packed rows of variable-length sequences sit in a padded ``(batch, max_len)`` grid.

    Built once per ``cu_seqlens`` and reused for every tensor padded to it. When every sequence has
    the same length (e.g. fixed-length queries) padding is a free ``view`` and no mask is needed.
    """

    def __init__(self, cu_seqlens: torch.Tensor):
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        self.cu_seqlens = cu_seqlens
        self.batch_size = lengths.numel()
        self.max_length = int(lengths.max()) if self.batch_size else 0
        self.uniform = self.batch_size > 0 and int(lengths.min()) == self.max_length
        if self.uniform:
            self.batch_index = self.position = self.valid = None
        else:
            self.batch_index, self.position = packed_positions(cu_seqlens)
            self.valid = torch.arange(self.max_length, device=cu_seqlens.device)[None, :] < lengths[:, None]

    def positions(self) -> torch.Tensor:
        """Position of every packed row inside its sequence."""
        if self.uniform:
            return torch.arange(self.max_length, device=self.cu_seqlens.device).repeat(self.batch_size)
        return self.position

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``(tokens, ...)`` -> ``(batch, max_len, ...)``, zeros at padded positions."""
        if self.uniform:
            return packed.view(self.batch_size, self.max_length, *packed.shape[1:])
        padded = packed.new_zeros((self.batch_size, self.max_length, *packed.shape[1:]))
        padded[self.batch_index, self.position] = packed
        return padded

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`pad`."""
        if self.uniform:
            return padded.reshape(-1, *padded.shape[2:])
        return padded[self.batch_index, self.position]


def pad_packed(packed: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed ``(tokens, ...)`` -> padded ``(batch, max_len, ...)`` and its boolean validity mask."""
    layout = PackedLayout(cu_seqlens)
    valid = layout.valid
    if valid is None:
        valid = torch.ones(layout.batch_size, layout.max_length, dtype=torch.bool, device=packed.device)
    return layout.pad(packed), valid


def unpad_padded(padded: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pad_packed`."""
    return PackedLayout(cu_seqlens).unpad(padded)


# --------------------------------------------------------------------------------------------
# Rotary positions (RoFormer, Su et al.): fractional positions for pooled queries
# --------------------------------------------------------------------------------------------


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin ``(tokens, 1, head_dim / 2)`` of the RoPE angles at float ``positions`` (fp32)."""
    exponents = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    angles = positions.float()[:, None] * (1.0 / theta**exponents)[None, :]
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half convention) on ``x`` ``(tokens, heads, head_dim)``, computed in fp32."""
    first, second = x.float().chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1).to(x.dtype)


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
            if config.position_embedding_type == "absolute"
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

    def pool(self, states: torch.Tensor, cu_seqlens: torch.Tensor):
        return pool_packed(
            states, cu_seqlens, self.kernel_size, self.stride, implementation=self.config.pooling_implementation
        )

    def forward(self, states: torch.Tensor, cu_seqlens: torch.Tensor):
        """``states`` ``(tokens, in_width)`` -> ``(tokens', width)`` and the new ``cu_seqlens``."""
        location = self.config.pooling_location if self.kernel_size is not None else None
        key_states, cu_k = states, cu_seqlens
        if location in ("pre", "intra"):
            query_states, cu_q = self.pool(states, cu_seqlens)
            if location == "pre":  # attention over the pooled sequence only
                key_states, cu_k = query_states, cu_q
        else:
            query_states, cu_q = states, cu_seqlens
        residual = query_states
        if self.width != self.in_width:  # upscaling: zero-pad the residual on the feature axis
            residual = F.pad(query_states, (0, self.width - self.in_width))

        key_layout = PackedLayout(cu_k)
        value = self.value(key_states).view(-1, self.heads, self.width // self.heads)
        if key_layout.max_length == 1:
            # softmax over a single key is 1: attention is the value projection, so Q, K and RoPE
            # are skipped (FlashAttention varlen also breaks on max_seqlen 1). Pooling keeps a length
            # of 1 at 1, so every query row is its sequence's only key row.
            attended = value
        else:
            query_layout = key_layout if cu_q is cu_k else PackedLayout(cu_q)
            attended = self._attend(query_states, key_states, value, query_layout, key_layout, location)
        hidden = self.dropout(self.dense(attended.reshape(-1, self.width))) + residual
        if location == "post":  # after the residual connection, before the normalisation
            hidden, cu_q = self.pool(hidden, cu_seqlens)
        return self.LayerNorm(hidden), cu_q

    def _attend(self, query_states, key_states, value, query_layout, key_layout, location):
        """Project Q/K (RoPE at integer key positions and window-centre query positions), then
        attention of the packed rows, dispatched through transformers' attention registry by
        ``config._attn_implementation`` (eager / sdpa / flash_attention_2 / ...)."""
        head_dim = self.width // self.heads
        query = self.query(query_states).view(-1, self.heads, head_dim)
        key = self.key(key_states).view(-1, self.heads, head_dim)
        if self.config.position_embedding_type == "rotary":
            key_cos, key_sin = rotary_cos_sin(key_layout.positions(), head_dim, self.config.rope_theta)
            if location == "intra":
                centres = window_centres(key_layout.cu_seqlens, self.kernel_size, self.stride)
                query_cos, query_sin = rotary_cos_sin(centres, head_dim, self.config.rope_theta)
            else:  # same rows for queries and keys
                query_cos, query_sin = key_cos, key_sin
            query = apply_rotary(query, query_cos, query_sin)
            key = apply_rotary(key, key_cos, key_sin)
        implementation = self.config._attn_implementation or "sdpa"
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        dropout = self.config.attention_probs_dropout_prob if self.training else 0.0
        scaling = head_dim**-0.5
        if implementation.startswith("flash_attention"):
            # packed rows as one "batch" of varlen sequences: no padding at all
            output, _ = attention(
                self, query[None].transpose(1, 2), key[None].transpose(1, 2), value[None].transpose(1, 2), None,
                dropout=dropout, scaling=scaling,
                cu_seq_lens_q=query_layout.cu_seqlens.int(), cu_seq_lens_k=key_layout.cu_seqlens.int(),
                max_length_q=query_layout.max_length, max_length_k=key_layout.max_length,
            )
            return output[0]
        mask = None if key_layout.valid is None else key_layout.valid[:, None, None, :]
        output, _ = attention(
            self,
            query_layout.pad(query).transpose(1, 2),
            key_layout.pad(key).transpose(1, 2),
            key_layout.pad(value).transpose(1, 2),
            mask,
            dropout=dropout,
            scaling=scaling,
        )
        return query_layout.unpad(output)


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

    def forward(self, states: torch.Tensor, cu_seqlens: torch.Tensor):
        attended, cu_seqlens = self.attention(states, cu_seqlens)
        hidden = self.dropout(self.output(self.activation(self.intermediate(attended))))
        return self.LayerNorm(hidden + attended), cu_seqlens


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class TitePreTrainedModel(PreTrainedModel):
    config_class = TiteConfig
    config: TiteConfig
    base_model_prefix = "tite"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _no_split_modules = ["TiteLayer"]

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
    returns the padded token states instead and its first token as ``pooler_output``.
    """

    def __init__(self, config: TiteConfig):
        super().__init__(config)
        self.embeddings = TiteEmbeddings(config)
        self.layers = nn.ModuleList([TiteLayer(config, index) for index in range(config.num_hidden_layers)])
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(
                f"input_ids must be (batch, length) with at least one token, got shape {tuple(input_ids.shape)}."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        lengths = attention_mask.sum(-1)
        if bool((lengths == 0).any()):
            raise ValueError("A text has no tokens (an all-zero attention_mask row); drop empty texts first.")
        longest = int(lengths.max())
        pools = any(kernel is not None for kernel in self.config.kernel_sizes)
        if pools and longest > self.config.max_position_embeddings:
            raise ValueError(
                f"A text has {longest} tokens but the pooling schedule reaches one vector only up to "
                f"max_position_embeddings={self.config.max_position_embeddings}; truncate to that length."
            )
        # unpad once: real tokens are the attention_mask == 1 positions, left-aligned or not
        valid = attention_mask.bool()
        cu_seqlens = cu_seqlens_from_lengths(lengths)
        positions = (torch.cumsum(valid.long(), -1) - 1)[valid]
        types = token_type_ids[valid] if token_type_ids is not None else None
        states = self.embeddings(input_ids[valid], positions, types)
        for layer in self.layers:
            states, cu_seqlens = layer(states, cu_seqlens)
        if pools:
            vectors = states  # every text is one vector now: (batch, hidden)
            output = BaseModelOutputWithPooling(last_hidden_state=vectors[:, None], pooler_output=vectors)
        else:
            padded, _ = pad_packed(states, cu_seqlens)
            output = BaseModelOutputWithPooling(last_hidden_state=padded, pooler_output=padded[:, 0])
        return output.to_tuple() if return_dict is False else output

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
        if config.position_embedding_type == "absolute" and config.max_position_embeddings > source_config.max_position_embeddings:
            raise ValueError(
                f"max_position_embeddings={config.max_position_embeddings} exceeds the backbone's "
                f"{source_config.max_position_embeddings} learned positions; lower it."
            )
        bert = BertModel.from_pretrained(name_or_path, add_pooling_layer=False)
        state = bert_to_tite_state_dict(bert.state_dict())
        positions = state.pop("embeddings.position_embeddings.weight")
        token_types = state.pop("embeddings.token_type_embeddings.weight")
        if config.position_embedding_type == "absolute":
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

    _tied_weights_keys = {
        "mae_head.decoder.weight": "tite.embeddings.word_embeddings.weight",
        "bow_head.decoder.weight": "tite.embeddings.word_embeddings.weight",
    }

    def __init__(self, config: TiteConfig, decoder_mask_probability: float = 0.5):
        super().__init__(config)
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
    "PackedLayout",
    "apply_rotary",
    "rotary_cos_sin",
    "bert_to_tite_state_dict",
    "pad_packed",
    "unpad_padded",
]
