"""TITE configuration: presets of the paper's Table 3 and validation errors."""

from __future__ import annotations

import pytest

from dense_encoders.models.tite.configuration_tite import TiteConfig, pooled_length
from dense_encoders.models.tite.presets import TINY_PRESETS, TITE_PRESETS, tite_preset


@pytest.mark.parametrize(
    ("length", "kernel", "stride", "expected"),
    [(512, 2, 2, 256), (5, 2, 2, 3), (1, 2, 2, 1), (0, 2, 2, 0), (3, 4, 2, 1), (512, 3, 3, 171), (7, 3, 2, 3),
     (8, 3, 2, 4), (9, None, None, 9)],
)
def test_pooled_length_by_hand(length, kernel, stride, expected):
    assert pooled_length(length, kernel, stride) == expected


@pytest.mark.parametrize("name", sorted(TITE_PRESETS) + sorted(TINY_PRESETS))
def test_every_preset_reaches_one_vector_or_does_not_pool(name):
    config = tite_preset(name)
    lengths = config.sequence_lengths()
    pools = any(k is not None for k in config.kernel_sizes)
    assert lengths[-1] == (1 if pools else config.max_position_embeddings)
    assert len(lengths) == config.num_hidden_layers + 1


def test_table3_schedules():
    assert tite_preset("tite-2-late").sequence_lengths()[3:] == [512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
    staggered = tite_preset("tite-2-staggered")
    assert [i + 1 for i, k in enumerate(staggered.kernel_sizes) if k] == [2, 3, 4, 6, 7, 8, 10, 11, 12]
    assert [i + 1 for i, k in enumerate(tite_preset("tite-3-staggered").kernel_sizes) if k] == [2, 4, 6, 8, 10, 12]
    assert tite_preset("tite-3-late").sequence_lengths()[6:] == [512, 171, 57, 19, 7, 3, 1]
    assert {tite_preset(n).pooling_location for n in ("tite-2-late-pre", "tite-2-late", "tite-2-late-post")} == {
        "pre", "intra", "post"}
    upscale = tite_preset("tite-2-late-upscale")
    assert upscale.hidden_sizes == [768] * 3 + [1024] * 3 + [1280] * 3 + [1536] * 3
    assert upscale.num_attention_heads == [12] * 3 + [16] * 3 + [20] * 3 + [24] * 3
    assert upscale.hidden_size == 1536 and upscale.embedding_size == 768
    assert tite_preset("minilm-l6-3-all").sequence_lengths() == [256, 86, 29, 10, 4, 2, 1]
    assert tite_preset("minilm-l6-4-late").sequence_lengths() == [256, 256, 256, 64, 16, 4, 1]


def test_round_trip(tmp_path):
    config = tite_preset("tiny-tite-2-late-upscale", pooling_location="post")
    config.save_pretrained(tmp_path)
    loaded = TiteConfig.from_pretrained(tmp_path)
    for key in ("hidden_sizes", "num_attention_heads", "intermediate_sizes", "kernel_sizes", "strides",
                "pooling_location", "max_position_embeddings"):
        assert getattr(loaded, key) == getattr(config, key), key


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(kernel_sizes=[None, 2, 2, 2, 2], strides=[None, 3, 2, 2, 2]), r"stride 3 > kernel size 2"),
        (dict(hidden_sizes=[32, 32, 64, 48, 64]), r"may only grow.*64 -> 48"),
        (dict(num_attention_heads=5), r"not divisible by 5 attention heads"),
        (dict(max_position_embeddings=64), r"reduces max_position_embeddings=64 to 4 vectors"),
        (dict(kernel_sizes=[None, 2, 2, 2]), r"kernel_sizes has 4 entries but num_hidden_layers=5"),
        (dict(strides=[None, 2, 2, 2, None]), r"layer 4: kernel_size=2 but stride=None"),
        (dict(pooling_location="inside"), r"pooling_location='inside'"),
        (dict(pooling_implementation="cuda"), r"pooling_implementation='cuda'"),
        (dict(position_embedding_type="alibi"), r"position_embedding_type='alibi'"),
    ],
)
def test_bad_configs_are_rejected_with_a_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        tite_preset("tiny-tite-2-late", **overrides)


def test_unknown_preset():
    with pytest.raises(ValueError, match="Unknown TITE preset 'tite-9'"):
        tite_preset("tite-9")


@pytest.mark.parametrize("name", sorted(TITE_PRESETS) + sorted(TINY_PRESETS))
def test_presets_turn_attention_dropout_off_as_the_paper_does(name):
    """TITE Sec. 4.1: dropout inside self-attention is deactivated (it made pre-training unstable);
    hidden-state dropout stays BERT's 0.1."""
    config = tite_preset(name)
    assert config.attention_probs_dropout_prob == 0.0
    assert config.hidden_dropout_prob == 0.1
    assert TiteConfig.from_dict(config.to_dict()).attention_probs_dropout_prob == 0.0  # what save/load keeps


def test_tite_config_default_has_no_attention_dropout():
    assert TiteConfig().attention_probs_dropout_prob == 0.0
    assert TiteConfig(attention_probs_dropout_prob=0.1).attention_probs_dropout_prob == 0.1  # still settable


def test_attention_is_deterministic_in_training_mode_without_dropout():
    """With the paper's settings only hidden-state dropout is random: switching it off makes two training-mode
    forwards identical, while an explicit attention dropout still makes them differ."""
    import torch

    from dense_encoders.models.tite.modeling_tite import TiteModel

    ids = torch.randint(5, 50, (2, 16))
    for attention_dropout, same in ((0.0, True), (0.5, False)):
        torch.manual_seed(0)
        model = TiteModel(tite_preset("tiny-tite-2-late", vocab_size=50, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=attention_dropout)).train()
        first, second = (model(input_ids=ids).pooler_output for _ in range(2))
        assert torch.equal(first, second) is same
