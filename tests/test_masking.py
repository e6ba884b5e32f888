"""Tests for WholeWordMaskingCollator (BERT whole-word masking, 80/10/10, single crop)."""

import collections

import pytest
import torch

from dense_encoders.data import WholeWordMaskingCollator
from dense_encoders.tokenization import word_ids

IGNORE = -100

# multi-piece words under bert-base-uncased: condenser -> conde ##nse ##r, embeddings -> em ##bed ##ding ##s, ...
TEXT = (
    "condenser pretraining of huggingface embeddings uses whole word masking and tokenization "
    "with antidisestablishmentarianism in the retrieval corpus for dense passage embeddings"
)


@pytest.fixture(scope="module")
def text_ids(tok):
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert sum(t.startswith("##") for t in tok.convert_ids_to_tokens(ids)) >= 10
    return ids


def single_token_word_ids(tok, n, start=2000):
    """n distinct ids of whole single-token words (no '##' pieces)."""
    out = []
    i = start
    while len(out) < n:
        t = tok.convert_ids_to_tokens(i)
        if t.isalpha() and not t.startswith("##"):
            out.append(i)
        i += 1
    return out


def words_of(tok, ids):
    groups = collections.defaultdict(list)
    for pos, w in enumerate(word_ids(tok.convert_ids_to_tokens(ids))):
        groups[w].append(pos)
    return list(groups.values())


def reconstruct(input_ids, labels):
    """Original tokens of a row: labels where masked, the input elsewhere."""
    return [lab if lab != IGNORE else inp for inp, lab in zip(input_ids, labels)]


# ----------------------------------------------------------------------------- selection


def test_masked_positions_cover_whole_words(tok, text_ids):
    collator = WholeWordMaskingCollator(tok, max_length=512, mlm_probability=0.3)
    words = words_of(tok, text_ids)
    budget = round(len(text_ids) * 0.3)
    seen_multi_piece = False
    for seed in range(200):
        torch.manual_seed(seed)
        inp, labels = collator.mask_tokens(text_ids)
        chosen = {i for i, lab in enumerate(labels) if lab != IGNORE}
        for word in words:  # a '##' piece is chosen iff its word's first piece is
            assert all((p in chosen) == (word[0] in chosen) for p in word), (seed, word, chosen)
            seen_multi_piece |= len(word) > 1 and word[0] in chosen
        assert len(chosen) == budget  # enough single-token words to always fill the budget
        assert all(labels[p] == text_ids[p] for p in chosen)
        assert all(inp[p] == text_ids[p] for p in range(len(inp)) if p not in chosen)
    assert seen_multi_piece


@pytest.mark.parametrize("n, expected_budget", [(1, 1), (2, 1), (7, 1), (10, 2), (20, 3), (40, 6), (100, 15)])
def test_budget_is_max_1_round_n_p(tok, n, expected_budget):
    collator = WholeWordMaskingCollator(tok, max_length=512)
    ids = single_token_word_ids(tok, n)
    for seed in range(5):
        torch.manual_seed(seed)
        _, labels = collator.mask_tokens(ids)
        assert sum(lab != IGNORE for lab in labels) == expected_budget


def test_words_that_overflow_the_budget_are_skipped(tok):
    # "cat" + 8-piece word: n=9, budget=max(1, round(1.35))=1 -> only "cat" fits, every time
    ids = tok("cat antidisestablishmentarianism", add_special_tokens=False)["input_ids"]
    assert len(ids) == 9
    collator = WholeWordMaskingCollator(tok, max_length=512)
    for seed in range(30):
        torch.manual_seed(seed)
        _, labels = collator.mask_tokens(ids)
        assert labels == [ids[0]] + [IGNORE] * 8
    # a single 8-piece word can never fit a budget of 1 -> nothing is masked (as in Google's BERT)
    _, labels = collator.mask_tokens(ids[1:])
    assert labels == [IGNORE] * 8


def test_word_selection_is_uniform_over_positions(tok):
    collator = WholeWordMaskingCollator(tok, max_length=512)
    ids = single_token_word_ids(tok, 20)  # budget 3 of 20 -> each position with prob 0.15
    torch.manual_seed(0)
    counts = torch.zeros(20)
    draws = 2000
    for _ in range(draws):
        _, labels = collator.mask_tokens(ids)
        counts += torch.tensor([lab != IGNORE for lab in labels], dtype=torch.float)
    freq = counts / draws
    assert torch.all((freq - 0.15).abs() < 0.035), freq


def test_special_tokens_inside_input_are_never_masked(tok):
    words = single_token_word_ids(tok, 6)
    ids = words[:3] + [tok.sep_token_id] + words[3:] + [tok.pad_token_id, tok.unk_token_id]
    collator = WholeWordMaskingCollator(tok, max_length=512, mlm_probability=1.0, mask_replace_prob=1.0,
                                        random_replace_prob=0.0)
    torch.manual_seed(0)
    inp, labels = collator.mask_tokens(ids)
    # budget = n: every maskable word ([UNK] included) is masked, [SEP]/[PAD] are not
    assert labels == words[:3] + [IGNORE] + words[3:] + [IGNORE, tok.unk_token_id]
    assert inp == [103] * 3 + [tok.sep_token_id] + [103] * 3 + [tok.pad_token_id, 103]


def test_zero_mlm_probability_masks_nothing(tok, text_ids):
    collator = WholeWordMaskingCollator(tok, max_length=512, mlm_probability=0.0)
    inp, labels = collator.mask_tokens(text_ids)
    assert inp == text_ids and labels == [IGNORE] * len(text_ids)


# ----------------------------------------------------------------------------- 80 / 10 / 10


def replacement_stats(tok, mask_p, random_p, draws=1000, seed=0):
    collator = WholeWordMaskingCollator(
        tok, max_length=512, mlm_probability=0.5, mask_replace_prob=mask_p, random_replace_prob=random_p
    )
    ids = single_token_word_ids(tok, 20)  # 10 masked tokens per draw
    torch.manual_seed(seed)
    n_mask = n_random = n_same = 0
    random_ids = []
    for _ in range(draws):
        inp, labels = collator.mask_tokens(ids)
        for i, lab in zip(inp, labels):
            if lab == IGNORE:
                continue
            if i == tok.mask_token_id:
                n_mask += 1
            elif i == lab:
                n_same += 1
            else:
                n_random += 1
                random_ids.append(i)
    total = n_mask + n_random + n_same
    assert total == draws * 10
    return n_mask / total, n_random / total, n_same / total, random_ids


def test_80_10_10_split(tok):
    mask_f, random_f, same_f, random_ids = replacement_stats(tok, 0.8, 0.1)
    # 10k masked tokens: std of the 10% share ~0.003; tolerance ~5 sigma
    assert abs(mask_f - 0.8) < 0.02, mask_f
    assert abs(random_f - 0.1) < 0.015, random_f
    assert abs(same_f - 0.1) < 0.015, same_f
    # random replacements: uniform over non-special vocabulary ids
    assert not set(random_ids) & set(tok.all_special_ids)
    assert all(0 <= i < len(tok) for i in random_ids)
    assert len(set(random_ids)) > 0.9 * len(random_ids)  # 1k draws from ~30k ids: few repeats
    assert 0.4 < sum(i >= len(tok) // 2 for i in random_ids) / len(random_ids) < 0.6


@pytest.mark.parametrize("mask_p, random_p", [(0.5, 0.5), (0.0, 0.0), (0.0, 1.0), (0.3, 0.3)])
def test_custom_replacement_probabilities(tok, mask_p, random_p):
    mask_f, random_f, same_f, _ = replacement_stats(tok, mask_p, random_p, draws=300)
    assert abs(mask_f - mask_p) < 0.04
    assert abs(random_f - random_p) < 0.04
    assert abs(same_f - (1 - mask_p - random_p)) < 0.04


# ----------------------------------------------------------------------------- cropping


def test_tokens_and_mask_share_one_crop(tok):
    original = list(range(2000, 2400))  # 400 distinct ids -> a window is identified by its first id
    collator = WholeWordMaskingCollator(tok, max_length=34)  # window of 32 tokens
    offsets = set()
    for seed in range(60):
        torch.manual_seed(seed)
        batch = collator([{"input_ids": original}])
        inp = batch["input_ids"][0].tolist()
        labels = batch["labels"][0].tolist()
        assert len(inp) == 34 and inp[0] == tok.cls_token_id and inp[-1] == tok.sep_token_id
        window = reconstruct(inp[1:-1], labels[1:-1])
        offset = window[0] - 2000
        # tokens AND labels come from the same contiguous window of the original
        assert window == original[offset : offset + 32], seed
        masked = [i for i, lab in enumerate(labels[1:-1]) if lab != IGNORE]
        assert len(masked) == round(32 * 0.15)
        # whole words are computed on the cropped window (a leading '##' piece is its own word)
        for word in words_of(tok, window):
            assert all((p in masked) == (word[0] in masked) for p in word)
        offsets.add(offset)
    assert len(offsets) > 20  # the crop offset is random
    assert min(offsets) >= 0 and max(offsets) <= 400 - 32


def test_crop_offset_covers_both_ends(tok):
    original = list(range(2000, 2010))
    collator = WholeWordMaskingCollator(tok, max_length=10)  # window 8 -> offsets 0, 1, 2
    torch.manual_seed(0)
    offsets = collections.Counter()
    for _ in range(300):
        inp, labels = collator.mask_tokens(original)
        window = reconstruct(inp, labels)
        offsets[window[0] - 2000] += 1
        assert window == original[window[0] - 2000 :][:8]
    assert set(offsets) == {0, 1, 2}
    assert all(60 < c < 140 for c in offsets.values()), offsets


def test_short_examples_are_not_cropped(tok, text_ids):
    collator = WholeWordMaskingCollator(tok, max_length=len(text_ids) + 2)
    torch.manual_seed(3)
    inp, labels = collator.mask_tokens(text_ids)
    assert len(inp) == len(text_ids)
    assert reconstruct(inp, labels) == text_ids


# ----------------------------------------------------------------------------- batch layout


def test_batch_specials_padding_and_masks(tok, text_ids):
    lengths = [len(text_ids), 5, 1, 12]
    examples = [{"input_ids": text_ids[:n]} for n in lengths]
    examples[1]["input_ids"] = torch.tensor(examples[1]["input_ids"])  # tensors are accepted too
    collator = WholeWordMaskingCollator(tok, max_length=128)
    torch.manual_seed(0)
    batch = collator(examples)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    width = len(text_ids) + 2
    for key, value in batch.items():
        assert value.dtype == torch.long and value.shape == (4, width), key
    assert torch.equal(batch["token_type_ids"], torch.zeros(4, width, dtype=torch.long))
    for row, n in enumerate(lengths):
        inp, att, lab = (batch[k][row].tolist() for k in ("input_ids", "attention_mask", "labels"))
        assert att == [1] * (n + 2) + [0] * (width - n - 2)
        assert inp[0] == tok.cls_token_id and inp[n + 1] == tok.sep_token_id
        assert inp[n + 2 :] == [tok.pad_token_id] * (width - n - 2)
        assert lab[0] == IGNORE and lab[n + 1 :] == [IGNORE] * (width - n - 1)
        assert reconstruct(inp[1 : n + 1], lab[1 : n + 1]) == text_ids[:n]
        assert sum(x != IGNORE for x in lab) <= max(1, round(n * 0.15))
    # a one-token example still gets its one masked token
    assert batch["labels"][2, 1].item() == text_ids[0]


def test_pad_to_multiple_of(tok):
    collator = WholeWordMaskingCollator(tok, max_length=128, pad_to_multiple_of=8)
    batch = collator([{"input_ids": [2000] * 7}, {"input_ids": [2001] * 3}])
    assert batch["input_ids"].shape == (2, 16)  # 7 + 2 = 9 -> 16
    assert batch["attention_mask"].sum(1).tolist() == [9, 5]
    batch = collator([{"input_ids": [2000] * 6}])
    assert batch["input_ids"].shape == (1, 8)


def test_global_rng_reproducibility_and_resume(tok, text_ids):
    collator = WholeWordMaskingCollator(tok, max_length=16)
    examples = [{"input_ids": text_ids}, {"input_ids": text_ids[3:20]}]
    torch.manual_seed(123)
    first = collator(examples)
    state = torch.get_rng_state()  # what Trainer checkpoints
    second = collator(examples)
    torch.manual_seed(123)
    again = collator(examples)
    assert all(torch.equal(first[k], again[k]) for k in first)
    torch.set_rng_state(state)
    resumed = collator(examples)
    assert all(torch.equal(second[k], resumed[k]) for k in second)
    assert not torch.equal(first["labels"], second["labels"])  # fresh randomness per call


def test_explicit_generator_ignores_global_rng(tok, text_ids):
    batches = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        gen = torch.Generator().manual_seed(7)
        collator = WholeWordMaskingCollator(tok, max_length=16, generator=gen)
        batches.append(collator([{"input_ids": text_ids}]))
    assert all(torch.equal(batches[0][k], batches[1][k]) for k in batches[0])


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_length": 2}, r"max_length must be an integer >= 3.*got 2"),
        ({"max_length": 12.5}, r"max_length.*12\.5"),
        ({"mlm_probability": 1.5}, r"mlm_probability must be a probability in \[0, 1\], got 1\.5"),
        ({"mlm_probability": -0.1}, r"mlm_probability.*-0\.1"),
        ({"mask_replace_prob": 2}, r"mask_replace_prob.*got 2"),
        ({"random_replace_prob": -1}, r"random_replace_prob.*got -1"),
        (
            {"mask_replace_prob": 0.8, "random_replace_prob": 0.3},
            r"mask_replace_prob \+ random_replace_prob must be <= 1.*0\.8 \+ 0\.3",
        ),
        ({"pad_to_multiple_of": 0}, r"pad_to_multiple_of must be None or a positive integer, got 0"),
    ],
)
def test_invalid_arguments(tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        WholeWordMaskingCollator(tok, **kwargs)


def test_invalid_examples(tok):
    collator = WholeWordMaskingCollator(tok)
    with pytest.raises(ValueError, match=r"example 1 has 0 tokens"):
        collator([{"input_ids": [2000, 2001]}, {"input_ids": []}])
    with pytest.raises(ValueError, match=r"example 0 has no 'input_ids' \(found \['text'\]\).*tokenize_for_condenser"):
        collator([{"text": "hello"}])
    with pytest.raises(ValueError, match=r"example 0: token id 40000 is outside the tokenizer vocabulary \[0, 30522\)"):
        collator([{"input_ids": [2000, 40000]}])
    with pytest.raises(ValueError, match=r"empty batch"):
        collator([])
    with pytest.raises(ValueError, match=r"empty token list"):
        collator.mask_tokens([])


# ---------------------------------------------------------------------------- seeded, per example


def test_seeded_masks_depend_only_on_seed_epoch_and_example(tok):
    from dense_encoders.data import WholeWordMaskingCollator

    ids = tok("the unbelievable cathedral stood beside a quiet river in the old town " * 3,
                    add_special_tokens=False)["input_ids"]
    examples = [{"input_ids": ids, "example_index": i} for i in range(4)]
    collator = WholeWordMaskingCollator(tok, max_length=24, seed=11)
    whole = collator(examples)
    torch.manual_seed(123)  # the global RNG must not matter
    reordered = collator([examples[2], examples[0]])
    assert torch.equal(reordered["labels"][0], whole["labels"][2])
    assert torch.equal(reordered["input_ids"][1], whole["input_ids"][0])
    # same text, different example index: different crop/mask
    assert not torch.equal(whole["labels"][0], whole["labels"][1])
    collator.set_epoch(1)
    assert not torch.equal(collator(examples)["labels"], whole["labels"])
    collator.set_epoch(0)
    assert torch.equal(collator(examples)["labels"], whole["labels"])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_data_loader_workers_mask_with_the_epoch_set_last(tok, context):
    """A persistent worker keeps the collator it got at the first epoch: the epoch set afterwards must still reach
    it, so each epoch's masks are the in-process collator's for that epoch (not the first epoch's again)."""
    from conftest import batches_of_persistent_worker

    from dense_encoders.data import WholeWordMaskingCollator

    ids = tok("the unbelievable cathedral stood beside a quiet river in the old town " * 3,
              add_special_tokens=False)["input_ids"]
    examples = [{"input_ids": ids, "example_index": i} for i in range(4)]
    collator = WholeWordMaskingCollator(tok, max_length=24, seed=11)
    by_epoch = [batch["labels"] for batch in batches_of_persistent_worker(collator, examples, 4, context)]
    for epoch, labels in enumerate(by_epoch):
        collator.set_epoch(epoch)
        assert torch.equal(labels, collator(examples)["labels"]), epoch
    assert not torch.equal(by_epoch[0], by_epoch[1]) and not torch.equal(by_epoch[1], by_epoch[2])


def test_without_example_index_the_global_rng_is_used(tok):
    from dense_encoders.data import WholeWordMaskingCollator

    ids = tok("a river runs through the valley and past the mill " * 2, add_special_tokens=False)["input_ids"]
    collator = WholeWordMaskingCollator(tok, max_length=16, seed=11)
    torch.manual_seed(5)
    first = collator([{"input_ids": ids}])
    torch.manual_seed(5)
    assert torch.equal(collator([{"input_ids": ids}])["labels"], first["labels"])
