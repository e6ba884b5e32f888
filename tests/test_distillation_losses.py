"""Distillation losses (dense_encoders.trainer.losses) against independent references.

References used here: arithmetic by hand in plain Python floats, sentence-transformers' own
MarginMSELoss / DistillKLDivLoss, Proposition 3 of "In defense of dual-encoders for neural
ranking", and a naive per-query loop building TITE's InfoNCE candidate set explicitly.
"""

from __future__ import annotations

import math

import pytest
import torch

from dense_encoders.trainer.losses import (
    LOSSES,
    DistillationObjective,
    infonce_loss,
    kl_divergence_loss,
    m3se_loss,
    margin_mse_loss,
    mse_loss,
    parse_loss_spec,
    rankdistil_b_loss,
    softmax_cross_entropy_loss,
)

NAN = float("nan")
INF = float("inf")


def _softmax(xs: list[float], tau: float) -> list[float]:
    m = max(x / tau for x in xs)
    e = [math.exp(x / tau - m) for x in xs]
    z = sum(e)
    return [v / z for v in e]


# --------------------------------------------------------------------------------------------
# hand-computed values, with padded documents that must not matter
# --------------------------------------------------------------------------------------------

# one query, three real documents: teacher t, student s
T3 = [3.0, 1.0, 0.0]
S3 = [2.0, 1.0, 1.5]


def _padded_batch(pad_student: float, pad_teacher: float):
    """Row 0: the three docs + a padded slot at the end; row 1: same docs permuted, pad first."""
    student = torch.tensor(
        [[S3[0], S3[1], S3[2], pad_student], [pad_student, S3[2], S3[0], S3[1]]], dtype=torch.float64
    )
    teacher = torch.tensor(
        [[T3[0], T3[1], T3[2], pad_teacher], [pad_teacher, T3[2], T3[0], T3[1]]], dtype=torch.float64
    )
    mask = torch.tensor([[True, True, True, False], [False, True, True, True]])
    return student, teacher, mask


def _hand_values() -> dict[str, float]:
    tau = 2.0
    p_t = _softmax(T3, tau)
    p_s = _softmax(S3, tau)
    return {
        # mean of (s - t)^2: (2-3)^2, (1-1)^2, (1.5-0)^2
        "mse": (1.0 + 0.0 + 2.25) / 3,
        # pairs (0,1): (3-1)-(2-1)=1; (0,2): (3-0)-(2-1.5)=2.5; (1,2): (1-0)-(1-1.5)=1.5
        "margin_mse": (1.0**2 + 2.5**2 + 1.5**2) / 3,
        # P={0} (teacher top), N={1,2}, j*=1 (teacher 1.0 > 0.0):
        # ((3-1)-(2-1))^2 = 1 ; relu(1-1)^2 = 0 ; relu(1.5-1)^2 = 0.25
        "m3se": 1.0 + 0.0 + 0.25,
        "sce": -sum(pt * math.log(ps) for pt, ps in zip(p_t, p_s)),
        "kl": tau**2 * sum(pt * math.log(pt / ps) for pt, ps in zip(p_t, p_s)),
        # gamma = 0.5: (3-2)^2 + relu(1-0.5)^2 + relu(1.5-0.5)^2
        "rankdistil_b": 1.0 + 0.25 + 1.0,
    }


def _call(name, student, teacher, mask):
    if name in ("sce", "kl"):
        return LOSSES[name](student, teacher, mask, temperature=2.0)
    if name == "rankdistil_b":
        return LOSSES[name](student, teacher, mask, gamma=0.5)
    return LOSSES[name](student, teacher, mask)


@pytest.mark.parametrize("name", ["mse", "margin_mse", "m3se", "sce", "kl", "rankdistil_b"])
@pytest.mark.parametrize("pad", [(100.0, -50.0), (NAN, NAN), (-INF, INF)])
def test_hand_computed_values_ignore_padding(name, pad):
    student, teacher, mask = _padded_batch(*pad)
    value = _call(name, student, teacher, mask)
    expected = _hand_values()[name]
    assert value.shape == (2,)
    assert value.tolist() == pytest.approx([expected, expected], rel=1e-12)
    # the same query without any padding slot
    unpadded = _call(name, torch.tensor([S3], dtype=torch.float64), torch.tensor([T3], dtype=torch.float64),
                     torch.ones(1, 3, dtype=torch.bool))
    assert unpadded.item() == pytest.approx(expected, rel=1e-12)


def test_padding_slot_would_matter_if_real():
    """Guard for the test above: turning the padded slot into a real document changes every loss."""
    student, teacher, mask = _padded_batch(100.0, -50.0)
    full = torch.ones_like(mask)
    for name in ["mse", "margin_mse", "m3se", "sce", "kl", "rankdistil_b"]:
        assert _call(name, student, teacher, full)[0].item() != pytest.approx(_hand_values()[name])


def test_m3se_and_rankdistil_with_explicit_positives():
    s = torch.tensor([S3], dtype=torch.float64)
    t = torch.tensor([T3], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    positives = torch.tensor([[True, False, True]])
    # P={0,2}, N={1}, j*=1: ((3-1)-(2-1))^2 + ((0-1)-(1.5-1))^2 + relu(1-1)^2
    assert m3se_loss(s, t, mask, positives).item() == pytest.approx(1.0 + 2.25)
    # gamma=0: (3-2)^2 + (0-1.5)^2 + relu(1-0)^2
    assert rankdistil_b_loss(s, t, mask, positives).item() == pytest.approx(1.0 + 2.25 + 1.0)


def test_default_positive_takes_first_index_on_ties():
    s = torch.tensor([[0.0, 5.0, 1.0]], dtype=torch.float64)
    t = torch.tensor([[2.0, 2.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    # P={0}: (2-0)^2 ; N={1,2}: relu(5)^2 + relu(1)^2
    assert rankdistil_b_loss(s, t, mask).item() == pytest.approx(4.0 + 25.0 + 1.0)
    # j* = 1 (first of N={1,2} by teacher 2.0 > 1.0): ((2-2)-(0-5))^2 + relu(5-5)^2 + relu(1-5)^2
    assert m3se_loss(s, t, mask).item() == pytest.approx(25.0)


def test_infonce_hand_computed_tiny():
    # one query, two docs, no other queries: -log(e^{s+} / (e^{s+} + e^{s-})), theta=3 lets doc 1 in
    scores = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    teacher = torch.tensor([[10.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    expected = -(1.0 - math.log(math.exp(1.0) + math.exp(3.0)))
    assert infonce_loss(scores, teacher, mask).item() == pytest.approx(expected)


# --------------------------------------------------------------------------------------------
# sentence-transformers as reference
# --------------------------------------------------------------------------------------------


def _embeddings_for_scores(scores: torch.Tensor) -> list[torch.Tensor]:
    """Query embedding [1] and doc embeddings [score]: the dot products are exactly the scores."""
    q = torch.ones(scores.shape[0], 1, dtype=scores.dtype)
    return [q] + [scores[:, k : k + 1] for k in range(scores.shape[1])]


@pytest.mark.numerics
def test_margin_mse_matches_sentence_transformers():
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss

    g = torch.Generator().manual_seed(0)
    student = torch.randn(6, 2, generator=g, dtype=torch.float64) * 3
    teacher = torch.randn(6, 2, generator=g, dtype=torch.float64) * 5 + 2
    reference = MarginMSELoss(None).compute_loss_from_embeddings(_embeddings_for_scores(student), teacher)
    ours = margin_mse_loss(student, teacher, torch.ones(6, 2, dtype=torch.bool))
    assert ours.shape == (6,)
    assert ours.mean().item() == pytest.approx(reference.item(), rel=1e-10)


@pytest.mark.numerics
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_kl_matches_sentence_transformers(k, temperature):
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss

    g = torch.Generator().manual_seed(k)
    student = torch.randn(5, k, generator=g, dtype=torch.float64) * 2
    teacher = torch.randn(5, k, generator=g, dtype=torch.float64) * 4 - 1
    loss = DistillKLDivLoss(None, temperature=temperature)
    reference = loss.compute_loss_from_embeddings(_embeddings_for_scores(student), teacher)
    ours = kl_divergence_loss(student, teacher, torch.ones(5, k, dtype=torch.bool), temperature=temperature)
    assert ours.shape == (5,)
    assert ours.mean().item() == pytest.approx(reference.item(), rel=1e-10)


# --------------------------------------------------------------------------------------------
# Proposition 3 and invariances
# --------------------------------------------------------------------------------------------


def test_sce_is_binary_kl_form_of_proposition_3():
    """Appendix proof: l_sce = -sum_{z=+-1} sigma(z(t1-t2); tau) log sigma(z(s1-s2); tau)."""
    t1, t2, s1, s2, tau = 1.3, -0.4, 0.2, 0.5, 1.7

    def sigma(z):
        return 1.0 / (1.0 + math.exp(-z / tau))

    expected = -sum(sigma(z * (t1 - t2)) * math.log(sigma(z * (s1 - s2))) for z in (1, -1))
    value = softmax_cross_entropy_loss(
        torch.tensor([[s1, s2]], dtype=torch.float64),
        torch.tensor([[t1, t2]], dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.bool),
        temperature=tau,
    )
    assert value.item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.numerics
def test_proposition_3_sce_gradient_tends_to_margin_mse_gradient():
    teacher = torch.tensor([[1.3, -0.4]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)

    def grad(fn):
        s = torch.tensor([[0.2, 0.5]], dtype=torch.float64, requires_grad=True)
        fn(s).sum().backward()
        return s.grad[0]

    target = grad(lambda s: margin_mse_loss(s, teacher, mask)) / 8
    assert target.abs().min() > 0.1  # a non-degenerate reference
    errors = []
    for tau in [1.0, 10.0, 100.0, 1000.0]:
        scaled = tau**2 * grad(lambda s, tau=tau: softmax_cross_entropy_loss(s, teacher, mask, temperature=tau))
        errors.append(((scaled - target).abs() / target.abs()).max().item())
    assert all(errors[i] > errors[i + 1] for i in range(len(errors) - 1)), errors
    assert errors[-1] < 1e-3, errors
    assert errors[0] > 1e-2, errors  # at tau = 1 the two really differ


def _random_masked_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    student = torch.randn(4, 5, generator=g, dtype=torch.float64) * 2
    teacher = torch.randn(4, 5, generator=g, dtype=torch.float64) * 6 + 3
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 0] = False
    mask[3, 2:] = False
    return student, teacher, mask


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["margin_mse", "m3se", "sce", "kl"])
def test_translation_invariance(name):
    student, teacher, mask = _random_masked_batch()
    shift = torch.tensor([[5.0], [-3.0], [100.0], [0.25]], dtype=torch.float64)
    base = _call(name, student, teacher, mask)
    torch.testing.assert_close(_call(name, student + shift, teacher, mask), base, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(_call(name, student, teacher + shift, mask), base, rtol=1e-9, atol=1e-9)


def test_translation_changes_logit_matching():
    """Guard: the shift used above is not a no-op for a loss that is not translation invariant."""
    student, teacher, mask = _random_masked_batch()
    shift = torch.tensor([[5.0], [-3.0], [100.0], [0.25]], dtype=torch.float64)
    assert not torch.allclose(mse_loss(student + shift, teacher, mask), mse_loss(student, teacher, mask))


def test_m3se_equals_margin_mse_for_one_positive_one_negative():
    g = torch.Generator().manual_seed(3)
    student = torch.randn(8, 3, generator=g, dtype=torch.float64)
    teacher = torch.randn(8, 3, generator=g, dtype=torch.float64) * 4
    mask = torch.ones(8, 3, dtype=torch.bool)
    mask[:, 2] = False  # two real docs each, one padded slot
    mask[5] = torch.tensor([True, False, True])
    torch.testing.assert_close(m3se_loss(student, teacher, mask), margin_mse_loss(student, teacher, mask))
    # also with the positive given explicitly (here: the teacher's lower-scored doc 1 where real)
    positives = torch.zeros_like(mask)
    positives[:, 1] = True
    positives[5] = torch.tensor([False, False, True])
    torch.testing.assert_close(m3se_loss(student, teacher, mask, positives), margin_mse_loss(student, teacher, mask))


# --------------------------------------------------------------------------------------------
# gradients with padding
# --------------------------------------------------------------------------------------------


def _garbage_padded(mask: torch.Tensor, student: torch.Tensor, teacher: torch.Tensor):
    garbage = torch.tensor([NAN, INF, -INF, 1e30, -1e30], dtype=torch.float64)
    fill = garbage.repeat(mask.numel() // 5 + 1)[: mask.numel()].view_as(mask)
    return torch.where(mask, student, fill), torch.where(mask, teacher, fill.flip(1))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradients_finite_and_zero_on_padding(name):
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor(
        [[True] * 5, [False, True, False, True, False], [True, True, True, True, False]]
    )  # query 1: only 2 real docs out of 5
    student, teacher = _garbage_padded(
        mask,
        torch.randn(3, 5, generator=g, dtype=torch.float64),
        torch.randn(3, 5, generator=g, dtype=torch.float64) * 5,
    )
    if name == "infonce":
        scores = torch.randn(3, 15, generator=g, dtype=torch.float64)
        flat = mask.reshape(1, -1).expand(3, -1)
        scores, _ = _garbage_padded(flat, scores, scores)
        leaf = scores.clone().requires_grad_()
        value = infonce_loss(leaf, teacher, mask, theta=1.0)
        pad = ~flat
    else:
        leaf = student.clone().requires_grad_()
        value = _call(name, leaf, teacher, mask)
        pad = ~mask
    assert value.shape == (3,)
    assert torch.isfinite(value).all()
    value.sum().backward()
    assert torch.isfinite(leaf.grad).all()
    assert (leaf.grad[pad] == 0).all()
    assert leaf.grad[~pad].abs().sum() > 0
    assert (leaf.grad[1].abs() > 0).any()  # the 2-document query trains too


def test_teacher_gets_no_gradient_and_low_precision_student():
    student, teacher, mask = _random_masked_batch()
    teacher = teacher.clone().requires_grad_()
    s16 = student.to(torch.bfloat16).requires_grad_()
    value = kl_divergence_loss(s16, teacher, mask)
    assert value.dtype == torch.float64
    value.sum().backward()
    assert teacher.grad is None
    assert s16.grad is not None and s16.grad.dtype == torch.bfloat16


# --------------------------------------------------------------------------------------------
# InfoNCE against an explicitly built candidate list
# --------------------------------------------------------------------------------------------


def _naive_infonce(scores, teacher, mask, global_mask, offset, theta, tau, in_batch):
    n_global, k = len(global_mask), len(global_mask[0])
    losses = []
    for q in range(len(teacher)):
        gq = offset + q
        best = None
        for d in range(k):
            if mask[q][d] and (best is None or teacher[q][d] > teacher[q][best]):
                best = d
        cols = [gq * k + best]
        for d in range(k):
            if d != best and mask[q][d] and teacher[q][best] - teacher[q][d] >= theta:
                cols.append(gq * k + d)
        if in_batch:
            for j in range(n_global):
                if j == gq:
                    continue
                for d in range(k):
                    if global_mask[j][d]:
                        cols.append(j * k + d)
        logits = [scores[q][c] / tau for c in cols]
        m = max(logits)
        lse = m + math.log(sum(math.exp(x - m) for x in logits))
        losses.append(lse - logits[0])
    return losses


GLOBAL_MASK = [[True, True, False], [True, True, True], [True, False, True]]
# teacher of the local query (global query 1): best doc 1 (8.0); doc 0 is 6 below, doc 2 3.5 below
LOCAL_TEACHER = [[2.0, 8.0, 4.5]]


@pytest.mark.parametrize(
    "theta,tau,in_batch,n_candidates",
    [(3.0, 1.0, True, 3 + 2 + 2), (4.0, 1.0, True, 2 + 2 + 2), (3.0, 0.5, False, 3), (4.0, 2.0, False, 2)],
)
@pytest.mark.numerics
def test_infonce_matches_naive_candidate_list(theta, tau, in_batch, n_candidates):
    g = torch.Generator().manual_seed(7)
    scores = torch.randn(1, 9, generator=g, dtype=torch.float64) * 3
    global_mask = torch.tensor(GLOBAL_MASK)
    scores_garbage = scores.clone()
    scores_garbage[0, 2] = NAN  # padded doc of global query 0
    value = infonce_loss(
        scores_garbage,
        torch.tensor(LOCAL_TEACHER, dtype=torch.float64),
        global_mask[1:2],
        query_offset=1,
        theta=theta,
        temperature=tau,
        in_batch=in_batch,
        global_mask=global_mask,
    )
    expected = _naive_infonce(scores.tolist(), LOCAL_TEACHER, GLOBAL_MASK[1:2], GLOBAL_MASK, 1, theta, tau, in_batch)
    assert value.tolist() == pytest.approx(expected, rel=1e-12)
    # the parametrised candidate count really differs between cases (theta excludes doc 2)
    cols = [1 * 3 + 1] + [3 + d for d in (0, 2) if LOCAL_TEACHER[0][1] - LOCAL_TEACHER[0][d] >= theta]
    if in_batch:
        cols += [0, 1, 6, 8]
    assert len(cols) == n_candidates


def test_infonce_two_local_queries_with_offset_and_default_global_mask():
    g = torch.Generator().manual_seed(11)
    teacher = [[1.0, 9.0, 7.0], [5.0, 5.0, 0.0]]  # query 2: tie -> doc 0 positive, doc 1 excluded
    local_mask = [GLOBAL_MASK[1], [True, True, True]]
    global_mask = [GLOBAL_MASK[0]] + local_mask
    scores = torch.randn(2, 9, generator=g, dtype=torch.float64)
    value = infonce_loss(
        scores,
        torch.tensor(teacher, dtype=torch.float64),
        torch.tensor(local_mask),
        query_offset=1,
        theta=3.0,
        global_mask=torch.tensor(global_mask),
    )
    expected = _naive_infonce(scores.tolist(), teacher, local_mask, global_mask, 1, 3.0, 1.0, True)
    assert value.tolist() == pytest.approx(expected, rel=1e-12)
    # G == Q: global_mask defaults to mask
    local = scores[:, 3:]
    value = infonce_loss(local, torch.tensor(teacher, dtype=torch.float64), torch.tensor(local_mask), theta=3.0)
    expected = _naive_infonce(local.tolist(), teacher, local_mask, local_mask, 0, 3.0, 1.0, True)
    assert value.tolist() == pytest.approx(expected, rel=1e-12)


def test_infonce_theta_margin_is_inclusive():
    """In-sample negatives are at least theta below the best: a document exactly theta below is one,
    a document less than theta below is left out (a likely false negative)."""
    scores = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    at_margin = infonce_loss(scores, torch.tensor([[8.0, 5.0]], dtype=torch.float64), mask, theta=3.0)
    assert at_margin.item() == pytest.approx(math.log(1 + math.exp(1.0)))
    within = infonce_loss(scores, torch.tensor([[8.0, 5.1]], dtype=torch.float64), mask, theta=3.0)
    assert within.item() == pytest.approx(0.0)  # only the positive is a candidate


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_validation_errors():
    s = torch.zeros(4, 3)
    t = torch.zeros(4, 3)
    mask = torch.ones(4, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="same shape"):
        mse_loss(s, torch.zeros(4, 2), mask)
    with pytest.raises(ValueError, match="mask must have the same shape"):
        mse_loss(s, t, mask[:, :2])
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        mse_loss(s, t, mask.float())
    with pytest.raises(ValueError, match="floating-point"):
        mse_loss(s.long(), t, mask)
    empty = mask.clone()
    empty[2] = False
    with pytest.raises(ValueError, match="query 2 has none"):
        softmax_cross_entropy_loss(s, t, empty)
    bad = t.clone()
    bad[1, 2] = NAN
    with pytest.raises(ValueError, match="teacher scores contain NaN/inf at query index 1"):
        kl_divergence_loss(s, bad, mask)
    bad_s = s.clone()
    bad_s[3, 0] = INF
    with pytest.raises(ValueError, match="student scores contain NaN/inf at query index 3"):
        margin_mse_loss(bad_s, t, mask)
    one = mask.clone()
    one[3, 1:] = False
    with pytest.raises(ValueError, match="margin_mse needs at least 2 documents per query; query 3 has 1"):
        margin_mse_loss(s, t, one)
    with pytest.raises(ValueError, match="m3se needs at least 2 documents per query; query 3 has 1"):
        m3se_loss(s, t, one)
    with pytest.raises(ValueError, match="query 0 has no negative"):
        m3se_loss(s, t, mask, positives=mask)
    with pytest.raises(ValueError, match="positives marks a padded document at query index 3"):
        rankdistil_b_loss(s, t, one, positives=mask)
    with pytest.raises(ValueError, match="temperature must be a positive finite number"):
        softmax_cross_entropy_loss(s, t, mask, temperature=0.0)


def test_infonce_validation_errors():
    teacher = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"scores.shape\[1\] must equal G\*K"):
        infonce_loss(torch.zeros(2, 7), teacher, mask)
    with pytest.raises(ValueError, match=r"scores.shape\[1\] must equal G\*K = 4\*3 = 12"):
        infonce_loss(torch.zeros(2, 9), teacher, mask, global_mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not fit"):
        infonce_loss(torch.zeros(2, 12), teacher, mask, query_offset=3, global_mask=torch.ones(4, 3, dtype=torch.bool))
    other = torch.ones(4, 3, dtype=torch.bool)
    other[1, 0] = False
    with pytest.raises(ValueError, match="must equal the local mask"):
        infonce_loss(torch.zeros(2, 12), teacher, mask, query_offset=0, global_mask=other)
    bad = torch.zeros(2, 6)
    bad[1, 4] = NAN
    with pytest.raises(ValueError, match="scores contain NaN/inf at query index 1"):
        infonce_loss(bad, teacher, mask)


# --------------------------------------------------------------------------------------------
# spec parsing and the combined objective
# --------------------------------------------------------------------------------------------


def test_parse_loss_spec():
    assert parse_loss_spec("margin_mse+kl+infonce") == {"margin_mse": 1.0, "kl": 1.0, "infonce": 1.0}
    assert parse_loss_spec(" margin_mse : 1 + kl:0.5+ infonce:2 ") == {"margin_mse": 1.0, "kl": 0.5, "infonce": 2.0}
    assert parse_loss_spec("sce:1e-1") == {"sce": 0.1}
    with pytest.raises(ValueError, match="unknown loss 'foo'.*known losses: mse, margin_mse, m3se, sce, kl"):
        parse_loss_spec("margin_mse+foo")
    with pytest.raises(ValueError, match="appears twice"):
        parse_loss_spec("kl+margin_mse+kl:2")
    with pytest.raises(ValueError, match="bad weight 'abc'"):
        parse_loss_spec("kl:abc")
    with pytest.raises(ValueError, match="finite number > 0"):
        parse_loss_spec("kl:-1")
    with pytest.raises(ValueError, match="finite number > 0"):
        parse_loss_spec("kl:nan")
    with pytest.raises(ValueError, match="empty term"):
        parse_loss_spec("kl++mse")
    with pytest.raises(ValueError, match="empty loss spec"):
        parse_loss_spec("  ")


@pytest.mark.numerics
def test_objective_total_is_weighted_sum_of_direct_components():
    g = torch.Generator().manual_seed(5)
    q_emb = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    d_emb = torch.randn(3 * 4, 4, generator=g, dtype=torch.float64)
    teacher = torch.randn(3, 4, generator=g, dtype=torch.float64) * 5
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[2, 3] = False
    batch_scores = q_emb @ d_emb.T  # [Q, G*K], G == Q
    student = torch.stack([batch_scores[q, q * 4 : (q + 1) * 4] for q in range(3)])

    objective = DistillationObjective(
        "margin_mse:1 + kl:0.5 + infonce:2 + sce:0.25",
        {"sce": {"temperature": 4}, "infonce": {"theta": 3}},
    )
    assert objective.min_documents == 2
    total, components = objective(student, teacher, mask, batch_scores=batch_scores)
    direct = {
        "margin_mse": margin_mse_loss(student, teacher, mask),
        "kl": kl_divergence_loss(student, teacher, mask),
        "infonce": infonce_loss(batch_scores, teacher, mask, theta=3),
        "sce": softmax_cross_entropy_loss(student, teacher, mask, temperature=4),
    }
    assert list(components) == ["margin_mse", "kl", "infonce", "sce"]
    for name, value in direct.items():
        torch.testing.assert_close(components[name], value)
    assert total.shape == (3,)
    expected = [
        1.0 * direct["margin_mse"][q].item()
        + 0.5 * direct["kl"][q].item()
        + 2.0 * direct["infonce"][q].item()
        + 0.25 * direct["sce"][q].item()
        for q in range(3)
    ]
    assert total.tolist() == pytest.approx(expected, rel=1e-12)
    # option actually forwarded: sce at temperature 1 differs
    assert not torch.allclose(components["sce"], softmax_cross_entropy_loss(student, teacher, mask))
    total.sum().backward()
    assert torch.isfinite(q_emb.grad).all() and q_emb.grad.abs().sum() > 0


def test_objective_options_and_errors():
    assert DistillationObjective("kl+sce").min_documents == 1
    assert DistillationObjective("mse+m3se").min_documents == 2
    assert DistillationObjective({"kl": 2, "mse": 0.5}).weights == {"kl": 2.0, "mse": 0.5}
    student = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="infonce loss needs batch_scores"):
        DistillationObjective("kl+infonce")(student, student, mask)
    with pytest.raises(ValueError, match="not in the spec"):
        DistillationObjective("kl", {"sce": {"temperature": 2}})
    with pytest.raises(ValueError, match="no option 'theta'"):
        DistillationObjective("kl", {"kl": {"theta": 2}})
    # positives reach m3se / rankdistil_b
    s = torch.tensor([S3], dtype=torch.float64)
    t = torch.tensor([T3], dtype=torch.float64)
    positives = torch.tensor([[True, False, True]])
    total, _ = DistillationObjective("m3se")(s, t, torch.ones(1, 3, dtype=torch.bool), positives=positives)
    assert total.item() == pytest.approx(3.25)


# --------------------------------------------------------------------------------------------
# the loss classes: what each declares, and the objective asking them
# --------------------------------------------------------------------------------------------


def test_each_loss_declares_what_it_needs():
    from dense_encoders.trainer.losses import LOSS_CLASSES, positive_set_loss_names

    assert list(LOSS_CLASSES) == ["mse", "margin_mse", "m3se", "sce", "kl", "rankdistil_b", "infonce"]
    assert {name for name, loss in LOSS_CLASSES.items() if loss.min_documents == 2} == {"margin_mse", "m3se"}
    assert positive_set_loss_names() == ["m3se", "rankdistil_b"]
    assert [name for name, loss in LOSS_CLASSES.items() if loss.needs_batch_scores] == ["infonce"]
    for name, loss in LOSS_CLASSES.items():
        assert LOSSES[name] is loss.function and loss.name == name
        assert loss.display_name and loss.equation and loss.citation
    objective = DistillationObjective("kl+infonce+rankdistil_b")
    assert objective.needs_batch_scores and objective.positive_set_losses == ["rankdistil_b"]
    assert objective.min_documents == 1
    assert not DistillationObjective("margin_mse+sce").needs_batch_scores
    assert DistillationObjective("margin_mse+sce").positive_set_losses == []


def test_settings_fields_reach_the_losses():
    """The command line's loss flags are the losses' declared settings; each reaches its loss's option."""
    import dataclasses

    from dense_encoders.trainer.distillation import DistillationSetup

    fields = {f.name: f.default for f in dataclasses.fields(DistillationSetup)}
    assert {key: fields[key] for key in ("sce_temperature", "kl_temperature", "infonce_theta", "infonce_temperature",
                                         "rankdistil_gamma")} == {
        "sce_temperature": 1.0, "kl_temperature": 1.0, "infonce_theta": 3.0, "infonce_temperature": 1.0,
        "rankdistil_gamma": 0.0}
    setup = DistillationSetup(student="s", train_file="t", losses="sce+kl:0.5+infonce+rankdistil_b",
                              sce_temperature=4.0, kl_temperature=0.5, infonce_theta=1.0, infonce_temperature=0.05,
                              rankdistil_gamma=0.5)
    described = {loss["name"]: loss for loss in setup.build_objective().describe()}
    assert {name: loss["options"] for name, loss in described.items()} == {
        "sce": {"temperature": 4.0}, "kl": {"temperature": 0.5},
        "infonce": {"theta": 1.0, "temperature": 0.05, "in_batch": True}, "rankdistil_b": {"gamma": 0.5}}
    assert described["kl"]["weight"] == 0.5 and described["kl"]["display_name"] == "KL"
    # the options are applied: the objective's kl equals the functional form at temperature 0.5
    student, teacher, mask = _padded_batch(100.0, -50.0)
    _, components = DistillationObjective("kl", settings=setup)(student, teacher, mask)
    torch.testing.assert_close(components["kl"], kl_divergence_loss(student, teacher, mask, temperature=0.5))
    assert not torch.allclose(components["kl"], kl_divergence_loss(student, teacher, mask))
    with pytest.raises(ValueError, match="unknown loss 'foo'"):
        DistillationSetup(student="s", train_file="t", losses="kl+foo")
