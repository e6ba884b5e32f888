"""Tests for dense_encoders.tokenization (bundled tokenizer, whole-word grouping)."""

import pytest

from dense_encoders.tokenization import bundled_tokenizer_path, load_tokenizer, word_ids


def test_bundled_tokenizer_path_has_wordpiece_vocab():
    path = bundled_tokenizer_path()
    assert path.is_dir()
    assert (path / "vocab.txt").is_file()
    assert (path / "tokenizer.json").is_file()
    first = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(first) == 30522  # bert-base-uncased
    assert first[101] == "[CLS]" and first[102] == "[SEP]" and first[103] == "[MASK]"


def test_load_tokenizer_is_bert_base_uncased(tok):
    assert len(tok) == 30522
    assert (tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.pad_token_id, tok.unk_token_id) == (
        101,
        102,
        103,
        0,
        100,
    )
    assert tok.tokenize("Whole Word Masking") == ["whole", "word", "mask", "##ing"]  # lower-cased WordPiece
    # an explicit path (str or Path) loads the same vocabulary
    for arg in (bundled_tokenizer_path(), str(bundled_tokenizer_path())):
        other = load_tokenizer(arg)
        assert other.get_vocab() == tok.get_vocab()


def test_word_ids_documented_example():
    assert word_ids(["the", "un", "##believ", "##able", "cat"]) == [0, 1, 1, 1, 2]


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([], []),
        (["a"], [0]),
        (["##ing"], [0]),  # leading continuation (after a crop) starts its own word
        (["##ing", "##s", "cat"], [0, 0, 1]),
        (["##ing", "cat", "##s", "##s", "dog"], [0, 1, 1, 1, 2]),
        (["[CLS]", "a", "##b", "[SEP]"], [0, 1, 1, 2]),
        (["#", "#a", "##"], [0, 1, 1]),  # only the "##" prefix marks a continuation
    ],
)
def test_word_ids_hand_computed(tokens, expected):
    assert word_ids(tokens) == expected


def test_word_ids_matches_fast_tokenizer_word_grouping(tok):
    # independent reference: the Rust pre-tokenizer's own word index (punctuation splits words too)
    text = "Condenser pre-training for huggingface embeddings, antidisestablishmentarianism and tokenization!"
    enc = tok(text, add_special_tokens=False)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    reference = enc.word_ids()
    # renumber the reference to 0, 1, 2, ... in order of appearance
    remap = {w: i for i, w in enumerate(dict.fromkeys(reference))}
    assert any(t.startswith("##") for t in tokens)
    assert word_ids(tokens) == [remap[w] for w in reference]


def test_word_ids_rejects_ids_instead_of_tokens():
    with pytest.raises(ValueError, match=r"convert_ids_to_tokens"):
        word_ids([1996, 4937])
