"""TITE configuration (Schlatt et al., SIGIR 2025: "TITE: Token-Independent Text Encoder").

Shipped as remote code next to every saved checkpoint: imports only ``transformers``.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

POOLING_LOCATIONS = ("pre", "intra", "post")
POOLING_IMPLEMENTATIONS = ("auto", "triton", "torch")
# "absolute+rotary": a learned table added to the embeddings AND rotary queries / keys in every layer
# (the TITE authors' released configuration)
POSITION_EMBEDDING_TYPES = ("rotary", "absolute", "absolute+rotary")
# how ``pooler_output`` reduces the token states of a TITE whose layers do not pool to one vector
OUTPUT_POOLINGS = ("first", "mean")
# what a text without tokens (an all-zero attention_mask row) gets: a refusal, or zero states (the TITE
# authors' code fills the output of an empty input with zeros; a converted Lightning IR bi-encoder with first
# pooling then gives the projection's bias, as Lightning IR does)
EMPTY_TEXTS = ("error", "zeros")
# Keys that only the TITE authors' code (github.com/webis-de/tite) writes into a config.json of model_type
# "tite": such a folder has other weight names and layouts, so it is refused here and converted by
# ``dense-encoders convert`` instead of being loaded with its weights silently initialised at random.
AUTHORS_CONFIG_KEYS = (
    "absolute_positional_embedding_type",
    "relative_positional_embedding_type",
    "positional_embedding_type",
    "rotary_interleaved",
    "norm_location",
    "norm_type",
    "dropout_prob",
    "rope_implementation",
)
CONVERT_HINT = ("convert the folder once with `dense-encoders convert FOLDER OUT` (pip install dense-encoders) "
                "and load OUT")
# Written into every saved ``config.json`` so that ``AutoModel.from_pretrained(folder, trust_remote_code=True)``
# (and so sentence-transformers) finds the encoder even in a folder a pre-training class saved.
TITE_AUTO_MAP = {
    "AutoConfig": "configuration_tite.TiteConfig",
    "AutoModel": "modeling_tite.TiteModel",
    "AutoModelForPreTraining": "modeling_tite.TiteForPreTraining",
}


def pooled_length(length, kernel_size: int | None, stride: int | None):
    """Sequence length after one pooling layer (TITE Eq. 1): ceil(max(0, L - k) / s) + 1, 0 for L = 0.

    The one place Eq. 1's output length is written. ``length`` is an ``int``, or, elementwise, an integer
    NumPy array or torch.Tensor (kept in its dtype and on its device, no host sync), so that the
    config's per-layer lengths and the pooling plan (``pooling_tite.pooled_lengths_host`` for a
    ``PoolPlan``) share it. ``kernel_size`` None (no pooling) returns ``length`` unchanged.
    """
    if kernel_size is None:
        return length
    excess = length - kernel_size
    excess = excess * (excess > 0)  # max(0, L - k), elementwise on arrays and tensors too
    return ((excess + stride - 1) // stride + 1) * (length > 0)  # integer ceil; 0 where L = 0


class TiteConfig(PretrainedConfig):
    r"""Configuration of a TITE encoder: transformer layers that pool the sequence down to one vector.

    Per-layer arguments take one value (used for every layer) or a list with one entry per layer.

    Args:
        vocab_size (`int`, defaults to 30522): WordPiece vocabulary size (bert-base-uncased).
        num_hidden_layers (`int`, defaults to 12): number of transformer layers.
        hidden_sizes (`int | list[int]`, defaults to 768): width of each layer's OUTPUT; may only grow
            (upscaling, paper Sec. 3.2: Q/K/V project from the previous width to the layer's width,
            the residual is zero-padded on the feature axis).
        num_attention_heads (`int | list[int]`, defaults to 12): heads per layer; must divide its width.
        intermediate_sizes (`int | list[int]`, defaults to 3072): feed-forward width per layer.
        kernel_sizes (`int | None | list[int | None]`): pooling window per layer, None = no pooling.
            Default: the paper's "late" k=2 schedule, (None x 3, 2 x 9).
        strides (`int | None | list[int | None]`): pooling stride per layer (<= kernel size), None where
            the kernel is None. Defaults to ``kernel_sizes``.
        pooling_location (`str`, defaults to "intra"): "pre" (pool, then attend over the pooled
            sequence), "intra" (pooled queries and residual, unpooled keys/values) or "post" (attend,
            then pool the layer output), paper Fig. 2.
        max_position_embeddings (`int`, defaults to 512): longest input; with pooling on, the schedule
            must reduce exactly this length to one vector.
        position_embedding_type (`str`, defaults to "rotary"): "rotary" (RoPE on queries and keys;
            pooled queries sit at window centres), "absolute" (learned table, e.g. for BERT warm starts)
            or "absolute+rotary" (both, as the TITE authors' released models: the table is added to the
            embeddings, RoPE rotates queries and keys in every layer).
        rope_theta (`float`, defaults to 10000.0): RoPE base.
        type_vocab_size (`int`, defaults to 0): token-type embeddings (0 = none; 2 for BERT warm starts).
        hidden_act (`str`, defaults to "gelu"), hidden_dropout_prob (0.1), layer_norm_eps (1e-12),
            initializer_range (0.02): as in BERT (post-norm LayerNorm).
        attention_probs_dropout_prob (`float`, defaults to 0.0): dropout on the attention probabilities.
            Off, as in the paper (Sec. 4.1: dropout inside self-attention made pre-training unstable)
            and the reference code; BERT's 0.1 is not the TITE default.
        pooling_implementation (`str`, defaults to "auto"): "triton", "torch", or "auto" (Triton when it
            can run, else PyTorch; a requested Triton that cannot run falls back with one log line).
        tie_word_embeddings (`bool`, defaults to True): tie the pre-training decoders to the word table.
        projection_size (`int`, *optional*): a linear layer from the final width to this many features,
            applied to the output (``pooler_output`` and ``last_hidden_state``), as bi-encoders fine-tuned
            with Lightning IR carry it (``projection: linear``); None (the default) = no projection.
        projection_bias (`bool`, defaults to True): whether that layer has a bias (``linear_no_bias``: False).
        output_pooling (`str`, defaults to "first"): for a TITE whose layers do not pool to one vector, how
            ``pooler_output`` reduces the last layer's token states: "first" (the first token's state) or
            "mean" (the mean over the text's tokens, as a Lightning IR bi-encoder with mean pooling computes
            it). A TITE that pools to one vector ignores it.
        empty_texts (`str`, defaults to "error"): a text without tokens (an all-zero ``attention_mask`` row)
            is refused ("error"), or gets zero states before the projection ("zeros"), as the TITE authors'
            code gives them: its ``pooler_output`` is then the projection's bias (zeros without projection).
            "zeros" needs ``output_pooling="first"`` or a TITE that pools to one vector.
        cuda_graphs (`bool`, defaults to False): inference on CUDA (fp16/bf16, Triton installed) replays
            CUDA graphs captured per bucket of (texts, tokens, longest text), so that the host launches
            one graph instead of every kernel; helps most for small batches. Capturing a new bucket
            costs about one forward pass; up to 16 graphs are kept.
    """

    model_type = "tite"

    def __init__(
        self,
        vocab_size: int = 30522,
        num_hidden_layers: int = 12,
        hidden_sizes: int | list[int] = 768,
        num_attention_heads: int | list[int] = 12,
        intermediate_sizes: int | list[int] = 3072,
        kernel_sizes: int | None | list[int | None] = (None, None, None, 2, 2, 2, 2, 2, 2, 2, 2, 2),
        strides: int | None | list[int | None] | str = "same",
        pooling_location: str = "intra",
        max_position_embeddings: int = 512,
        position_embedding_type: str = "rotary",
        rope_theta: float = 10000.0,
        type_vocab_size: int = 0,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.0,
        layer_norm_eps: float = 1e-12,
        initializer_range: float = 0.02,
        pooling_implementation: str = "auto",
        pad_token_id: int = 0,
        tie_word_embeddings: bool = True,
        cuda_graphs: bool = False,
        projection_size: int | None = None,
        projection_bias: bool = True,
        output_pooling: str = "first",
        empty_texts: str = "error",
        **kwargs: Any,
    ):
        refuse_foreign_config(kwargs)
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        self.hidden_sizes = _per_layer("hidden_sizes", hidden_sizes, num_hidden_layers)
        self.num_attention_heads = _per_layer("num_attention_heads", num_attention_heads, num_hidden_layers)
        self.intermediate_sizes = _per_layer("intermediate_sizes", intermediate_sizes, num_hidden_layers)
        self.kernel_sizes = _per_layer("kernel_sizes", kernel_sizes, num_hidden_layers)
        self.strides = (
            list(self.kernel_sizes) if strides == "same" else _per_layer("strides", strides, num_hidden_layers)
        )
        self.pooling_location = pooling_location
        self.max_position_embeddings = max_position_embeddings
        self.position_embedding_type = position_embedding_type
        self.rope_theta = rope_theta
        self.type_vocab_size = type_vocab_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.pooling_implementation = pooling_implementation
        self.tie_word_embeddings = tie_word_embeddings
        self.cuda_graphs = bool(cuda_graphs)
        self.projection_size = projection_size
        self.projection_bias = bool(projection_bias)
        self.output_pooling = output_pooling
        self.empty_texts = empty_texts
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        self.auto_map = {**TITE_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}
        self.validate_tite()

    @property
    def hidden_size(self) -> int:
        """Width of the output vector (the last layer's width)."""
        return self.hidden_sizes[-1]

    @property
    def sentence_embedding_dimension(self) -> int:
        """Width of the text's vector: the projection's when there is one, else the last layer's."""
        return self.projection_size or self.hidden_size

    @property
    def pools_to_one_vector(self) -> bool:
        """Whether the layers pool every text to one vector (any pooling layer; the schedule is checked)."""
        return any(kernel is not None for kernel in self.kernel_sizes)

    @property
    def embedding_size(self) -> int:
        """Width fed into the first layer (the first layer's input)."""
        return self.hidden_sizes[0]

    @property
    def rotary_positions(self) -> bool:
        """Whether the layers rotate queries and keys (RoPE)."""
        return "rotary" in self.position_embedding_type.split("+")

    @property
    def absolute_positions(self) -> bool:
        """Whether the embeddings add a learned position table."""
        return "absolute" in self.position_embedding_type.split("+")

    def sequence_lengths(self, length: int | None = None) -> list[int]:
        """Length entering the first layer, then after every layer, for an input of ``length`` tokens."""
        lengths = [self.max_position_embeddings if length is None else length]
        for kernel, stride in zip(self.kernel_sizes, self.strides):
            lengths.append(pooled_length(lengths[-1], kernel, stride))
        return lengths

    def validate_tite(self) -> None:
        """Raise a ValueError that names the bad value and the fix."""
        layers = self.num_hidden_layers
        for index, (width, heads) in enumerate(zip(self.hidden_sizes, self.num_attention_heads)):
            if width % heads:
                raise ValueError(
                    f"layer {index}: hidden size {width} is not divisible by {heads} attention heads; "
                    "choose a head count that divides the width (e.g. width / 64)."
                )
        for index in range(1, layers):
            if self.hidden_sizes[index] < self.hidden_sizes[index - 1]:
                raise ValueError(
                    f"hidden_sizes may only grow (upscaling); layer {index} narrows "
                    f"{self.hidden_sizes[index - 1]} -> {self.hidden_sizes[index]}. Use non-decreasing widths."
                )
        for index, (kernel, stride) in enumerate(zip(self.kernel_sizes, self.strides)):
            if (kernel is None) != (stride is None):
                raise ValueError(
                    f"layer {index}: kernel_size={kernel} but stride={stride}; both are None (no pooling) "
                    "or both are positive integers."
                )
            if kernel is not None and (kernel < 1 or stride < 1):
                raise ValueError(f"layer {index}: kernel_size={kernel}, stride={stride} must be >= 1.")
            if kernel is not None and stride > kernel:
                raise ValueError(
                    f"layer {index}: stride {stride} > kernel size {kernel} would skip tokens; "
                    f"use stride <= {kernel}."
                )
        if self.projection_size is not None and (isinstance(self.projection_size, bool)
                                                 or not isinstance(self.projection_size, int)
                                                 or self.projection_size < 1):
            raise ValueError(
                f"projection_size={self.projection_size!r}: give a positive width, or None for no projection.")
        if self.output_pooling not in OUTPUT_POOLINGS:
            raise ValueError(f"output_pooling={self.output_pooling!r}: choose one of {OUTPUT_POOLINGS}.")
        if self.empty_texts not in EMPTY_TEXTS:
            raise ValueError(f"empty_texts={self.empty_texts!r}: choose one of {EMPTY_TEXTS}.")
        if self.empty_texts == "zeros" and self.output_pooling == "mean" and not self.pools_to_one_vector:
            raise ValueError("empty_texts='zeros' with output_pooling='mean': the mean over no tokens is undefined; "
                             "use empty_texts='error'.")
        if self.pooling_location not in POOLING_LOCATIONS:
            raise ValueError(f"pooling_location={self.pooling_location!r}: choose one of {POOLING_LOCATIONS}.")
        if self.pooling_implementation not in POOLING_IMPLEMENTATIONS:
            raise ValueError(
                f"pooling_implementation={self.pooling_implementation!r}: choose one of {POOLING_IMPLEMENTATIONS}."
            )
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}: choose one of {POSITION_EMBEDDING_TYPES}."
            )
        if any(kernel is not None for kernel in self.kernel_sizes):
            lengths = self.sequence_lengths()
            if lengths[-1] != 1:
                raise ValueError(
                    f"the pooling schedule reduces max_position_embeddings={self.max_position_embeddings} to "
                    f"{lengths[-1]} vectors (lengths per layer: {lengths}), not to one. Add pooling layers, "
                    "raise kernel sizes / strides, or lower max_position_embeddings."
                )


def refuse_foreign_config(kwargs: dict) -> None:
    """Raise a one-line ValueError for a ``config.json`` that another implementation wrote: the TITE authors'
    (their keys) or Lightning IR's (``model_type`` "lir-*"). Loading either as our TITE would leave every
    weight but the word table randomly initialised."""
    model_type = kwargs.get("model_type", TiteConfig.model_type)
    if model_type != TiteConfig.model_type:
        origin = "a Lightning IR model" if str(model_type).startswith("lir-") else "another architecture"
        raise ValueError(
            f"This config.json describes model_type {model_type!r} ({origin}), not our TITE; "
            + (CONVERT_HINT + "." if str(model_type).startswith("lir-") else "load it with its own class.")
        )
    foreign = [key for key in AUTHORS_CONFIG_KEYS if key in kwargs]
    if foreign:
        raise ValueError(
            f"This config.json was written by the TITE authors' code (keys {', '.join(foreign[:3])}): its weights are "
            f"named and laid out differently from ours; {CONVERT_HINT}."
        )


def _per_layer(name: str, value, num_layers: int) -> list:
    """One value for every layer, or a list with exactly one entry per layer."""
    if isinstance(value, (list, tuple)):
        if len(value) != num_layers:
            raise ValueError(
                f"{name} has {len(value)} entries but num_hidden_layers={num_layers}; give one value or one per layer."
            )
        return list(value)
    return [value] * num_layers


TiteConfig.register_for_auto_class()

__all__ = ["AUTHORS_CONFIG_KEYS", "TiteConfig", "pooled_length", "POOLING_LOCATIONS", "refuse_foreign_config"]
