import math

import torch

from nemo_rl.algorithms.loss_functions import ClippedPGLossConfig, clipped_pg_loss, kl_penalty

NO_KL = ClippedPGLossConfig(reference_policy_kl_penalty=0.0)


def _grad(
    logp0: float, prev: float, adv: float, cfg: ClippedPGLossConfig = NO_KL
) -> tuple[float, float]:
    logp = torch.tensor([[logp0]], requires_grad=True)
    loss, _ = clipped_pg_loss(
        logp,
        torch.tensor([[prev]]),
        torch.tensor([[prev]]),
        torch.tensor([adv]),
        torch.ones(1, 1),
        cfg,
    )
    loss.backward()
    return float(loss.detach()), float(logp.grad)


def test_on_policy_loss_is_minus_advantage_and_pushes_up_good_tokens():
    loss, grad = _grad(-1.0, -1.0, adv=2.0)
    assert math.isclose(loss, -2.0, rel_tol=1e-6)
    assert grad < 0  # gradient descent raises log p of a positive-advantage token


def test_ratio_above_clip_with_positive_advantage_stops_the_gradient():
    loss, grad = _grad(math.log(1.5), 0.0, adv=1.0)  # ratio 1.5 > 1.2
    assert math.isclose(loss, -1.2, rel_tol=1e-6)
    assert grad == 0.0


def test_ratio_below_clip_with_negative_advantage_stops_the_gradient():
    _, grad = _grad(math.log(0.5), 0.0, adv=-1.0)  # ratio 0.5 < 0.8
    assert grad == 0.0


def test_clip_never_stops_a_gradient_that_undoes_a_bad_move():
    # ratio 1.5 on a negative-advantage token: the unclipped term is the min, gradient flows.
    _, grad = _grad(math.log(1.5), 0.0, adv=-1.0)
    assert grad > 0


def test_kl_penalty_is_zero_when_equal_and_positive_otherwise():
    logp = torch.tensor([-1.0, -1.0, -2.0])
    ref = torch.tensor([-1.0, -2.0, -1.0])
    kl = kl_penalty(logp, ref)
    assert kl[0] == 0
    assert (kl[1:] > 0).all()
    r = torch.tensor(-1.0)
    torch.testing.assert_close(kl[1], r.exp() - r - 1)


def test_kl_term_enters_the_loss_with_its_weight_and_respects_the_mask():
    cfg = ClippedPGLossConfig(reference_policy_kl_penalty=0.5)
    logp = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-2.0, -3.0]])
    mask = torch.tensor([[1, 0]])
    loss, stats = clipped_pg_loss(logp, logp, ref, torch.zeros(1), mask, cfg)
    expected_kl = float(kl_penalty(logp[0, 0], ref[0, 0]))
    assert math.isclose(float(stats["kl"]), expected_kl, rel_tol=1e-6)
    assert math.isclose(float(loss), 0.5 * expected_kl, rel_tol=1e-6)
