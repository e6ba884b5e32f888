"""The FLOP bound: multiply-adds (MACs) of the matrix products of one text at its real length.

Multiply-adds (MACs) of the matrix products per text at its REAL length, summed over the workload
(:func:`layer_macs`, :func:`tite_macs`, :func:`bert_macs`, :func:`infused_macs`). FLOP-bound ratio
= BERT's MACs / the row's MACs: the speed-up if time were proportional to real work; efficiency =
measured ratio / FLOP-bound ratio. "bound vs padded BERT" uses BERT's MACs on the padded batches
(what ``BertModel`` computes; TITE never computes on padding), the relevant ceiling on documents;
it is given for the random-order and for the length-sorted batches (sorting cuts the padding).

Lookups, LayerNorms, softmax, RoPE, GELU and the pooling means are not counted.
"""

from __future__ import annotations

from transformers import BertConfig


def layer_macs(l_in: int, l_out: int, d_in: int, d: int, d_ffn: int, location: str | None) -> int:
    """Multiply-adds of one transformer layer; ``location`` None = no pooling.

    Input length ``l_in``, output length ``l_out``, input width ``d_in``, width ``d``, FFN width ``d_ffn``:

    * no pooling: QKV ``3*Lin*din*d``, scores + weighted sum ``2*Lin*Lin*d``, out-proj ``Lin*d*d``,
      FFN ``2*Lin*d*f``
    * pre: pool first, everything on the pooled sequence (``Lout`` in place of ``Lin``)
    * intra: Q ``Lout*din*d``, K/V ``2*Lin*din*d``, attention ``2*Lout*Lin*d`` (pooled queries,
      unpooled keys), out-proj ``Lout*d*d``, FFN ``2*Lout*d*f``
    * post: QKV, attention and out-proj on ``Lin`` (pooling after the residual), FFN ``2*Lout*d*f``

    Lookups, LayerNorms, softmax, RoPE, GELU and the pooling means are not counted.
    """
    if location is None:
        return 3 * l_in * d_in * d + 2 * l_in * l_in * d + l_in * d * d + 2 * l_in * d * d_ffn
    if location == "pre":
        return 3 * l_out * d_in * d + 2 * l_out * l_out * d + l_out * d * d + 2 * l_out * d * d_ffn
    if location == "intra":
        return (l_out * d_in * d + 2 * l_in * d_in * d + 2 * l_out * l_in * d + l_out * d * d
                + 2 * l_out * d * d_ffn)
    if location == "post":
        return 3 * l_in * d_in * d + 2 * l_in * l_in * d + l_in * d * d + 2 * l_out * d * d_ffn
    raise ValueError(f"unknown pooling location {location!r}")


def tite_macs(config, length: int) -> int:
    """MACs of a :class:`TiteConfig` on one text of ``length`` tokens (plus the embedding
    down-projection ``L * d_final * d_first`` of an upscaled model)."""
    lengths = config.sequence_lengths(length)
    total = length * config.hidden_size * config.embedding_size if config.hidden_size != config.embedding_size else 0
    for index in range(config.num_hidden_layers):
        d_in = config.hidden_sizes[index - 1] if index else config.embedding_size
        location = config.pooling_location if config.kernel_sizes[index] is not None else None
        total += layer_macs(lengths[index], lengths[index + 1], d_in, config.hidden_sizes[index],
                            config.intermediate_sizes[index], location)
    return total


def bert_macs(config: BertConfig, length: int, num_layers: int | None = None) -> int:
    """MACs of a BERT-shaped encoder (``config.num_hidden_layers`` layers unless ``num_layers``)."""
    d, f = config.hidden_size, config.intermediate_size
    layers = config.num_hidden_layers if num_layers is None else num_layers
    return layers * layer_macs(length, length, d, d, f, None)


def infused_macs(config, length: int) -> int:
    """MACs of a cross-encoder-infused DE: BERT's formula with its ``num_copied_layers +
    num_new_layers`` layers (the mean pooling is not counted)."""
    return bert_macs(config, length, num_layers=config.num_copied_layers + config.num_new_layers)
