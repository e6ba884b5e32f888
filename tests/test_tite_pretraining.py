"""TiteForPreTraining: MAE and bag-of-words losses against naive per-text references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_tite_model import batch_of, random_texts

from dense_encoders.models.tite import TiteForPreTraining, tite_preset


def tiny_pretraining_model(name="tiny-tite-2-late-upscale"):
    torch.manual_seed(0)
    config = tite_preset(name, vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         pooling_implementation="torch")
    return TiteForPreTraining(config).eval()


def naive_decoder(model, vector, token_ids, visible):
    """One text: queries = vector + p_i; keys = [vector] + (E(x_j) + p_j); explicit per-query softmax."""
    decoder = model.mae_decoder
    width, heads = vector.shape[-1], decoder.heads
    head_dim = width // heads
    length = token_ids.shape[0]
    positions = decoder.position_embeddings.weight[:length]
    queries_in = vector[None] + positions
    keys_in = torch.cat([vector[None], model.tite.embeddings.word_embeddings(token_ids) + positions])
    q = decoder.query(queries_in).view(length, heads, head_dim)
    k = decoder.key(keys_in).view(length + 1, heads, head_dim)
    v = decoder.value(keys_in).view(length + 1, heads, head_dim)
    rows = []
    for i in range(length):
        keep = torch.cat([torch.tensor([True]), visible[i]])
        scores = torch.einsum("hd,khd->hk", q[i], k[keep]) / math.sqrt(head_dim)
        rows.append(torch.einsum("hk,khd->hd", scores.softmax(-1), v[keep]).reshape(width))
    hidden = decoder.attention_norm(decoder.dense(torch.stack(rows)) + queries_in)
    return decoder.LayerNorm(decoder.output(decoder.activation(decoder.intermediate(hidden))) + hidden)


@pytest.mark.numerics
def test_losses_match_naive_per_text_computation_in_a_padded_batch():
    model = tiny_pretraining_model()
    texts = random_texts(4, 16, seed=5)
    batch = batch_of(texts)
    length = batch["input_ids"].shape[1]
    generator = torch.Generator().manual_seed(9)
    visibility = torch.rand(4, length, length, generator=generator) < 0.5
    # make padded keys VISIBLE in the given pattern: the model must still hide them
    with torch.no_grad():
        output = model(**batch, decoder_visibility=visibility | ~batch["attention_mask"].bool()[:, None, :])
        token_losses, bags, bow_logits = [], [], []
        for row, text in enumerate(texts):
            n = len(text)
            vector = model.tite(input_ids=text[None]).pooler_output[0]
            visible = visibility[row, :n, :n]
            decoded = naive_decoder(model, vector, text, visible)
            targets = torch.arange(1, n - 1)  # first and last token are [CLS]/[SEP]
            token_losses.append(F.cross_entropy(model.mae_head(decoded[targets]), text[targets], reduction="none"))
            bag = torch.zeros(50)
            for token in text[1 : n - 1].tolist():
                bag[token] = 1.0
            bags.append(bag)
            bow_logits.append(model.bow_head(vector))
        mae = torch.cat(token_losses).mean()
        bow = F.binary_cross_entropy_with_logits(torch.stack(bow_logits), torch.stack(bags))
    torch.testing.assert_close(output.mae_loss, mae, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output.bow_loss, bow, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(output.loss, mae + bow, atol=1e-5, rtol=1e-5)


def test_sampled_visibility_hides_own_position_and_padding_at_the_configured_rate():
    model = tiny_pretraining_model()
    attention_mask = torch.ones(64, 16, dtype=torch.long)
    attention_mask[::2, 10:] = 0
    torch.manual_seed(1)
    visible = model.decoder_visibility(attention_mask)
    assert not visible.diagonal(dim1=1, dim2=2).any()
    assert not visible[::2, :, 10:].any()
    real_off_diagonal = visible[1::2][:, ~torch.eye(16, dtype=torch.bool)]
    assert abs(real_off_diagonal.float().mean().item() - 0.5) < 0.02


def test_decoders_are_tied_to_the_word_table_and_survive_save_load(tmp_path):
    model = tiny_pretraining_model()
    table = model.tite.embeddings.word_embeddings.weight
    assert model.mae_head.decoder.weight is table and model.bow_head.decoder.weight is table
    assert table.shape == (50, model.config.hidden_size)  # final width: the composed embedding E'
    model.save_pretrained(tmp_path)
    loaded = TiteForPreTraining.from_pretrained(tmp_path)
    assert loaded.bow_head.decoder.weight is loaded.tite.embeddings.word_embeddings.weight
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_input_masking_targets_are_the_original_tokens():
    model = tiny_pretraining_model("tiny-tite-2-late")
    texts = random_texts(3, 16, seed=6)
    batch = batch_of(texts)
    masked = batch["input_ids"].clone()
    labels = torch.full_like(masked, -100)
    masked[:, 2], labels[:, 2] = 3, batch["input_ids"][:, 2]  # id 3 stands in for [MASK]
    with torch.no_grad():
        output = model(input_ids=masked, attention_mask=batch["attention_mask"], labels=labels)
        bags = torch.zeros(3, 50)
        for row, text in enumerate(texts):
            bags[row, text[1 : len(text) - 1]] = 1.0  # the ORIGINAL tokens, never the stand-in
        expected = F.binary_cross_entropy_with_logits(model.bow_head(output.pooler_output), bags)
        plain = model.tite(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output
    torch.testing.assert_close(output.bow_loss, expected)
    assert bags[:, 3].sum() == 0 or not torch.equal(masked, batch["input_ids"])
    assert not torch.allclose(plain, output.pooler_output)  # the encoder did read the masked input
