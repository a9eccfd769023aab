import math

import pytest
import torch

from nemo_rl.algorithms.loss_functions import (
    BradleyTerryLoss,
    ClippedPGLossConfig,
    DPOLoss,
    NLLLoss,
    clipped_pg_loss,
    dpo_margin,
    kl_penalty,
    sequence_logprobs,
)
from nemo_rl.data import CharTokenizer, encode_completions, encode_preference_pairs
from nemo_rl.data.pairs import PreferencePair, stack_pair_sides
from nemo_rl.models.causal_lm import (
    ModelConfig,
    build_causal_lm,
    build_scalar_model,
    last_token_values,
    token_logprobs,
)

TOK = CharTokenizer()
SMALL = ModelConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2)
PAIRS = [PreferencePair("3+5=", "8", "9"), PreferencePair("42+7=", "49", "39")]

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


def test_nll_is_the_token_mean_over_the_answer_only():
    model = build_causal_lm(SMALL, TOK.vocab_size, seed=0)
    batch = encode_completions(TOK, ["3+5=", "42+7="], ["8", "49"])
    loss, stats = NLLLoss()(model, batch)
    logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(loss, -sequence_logprobs(logp, batch["response_mask"]).sum())
    assert stats == {} and float(NLLLoss().normalizer(batch)) == 2 + 3  # "8<eos>", "49<eos>"
    masked = {**batch, "response_mask": torch.zeros_like(batch["response_mask"])}
    assert float(NLLLoss()(model, masked)[0].detach()) == 0.0  # the prompt is never a target


def test_dpo_margin_is_zero_at_the_reference_and_the_loss_is_log_2():
    model = build_causal_lm(SMALL, TOK.vocab_size, seed=0)
    batch = encode_preference_pairs(TOK, PAIRS)
    both = stack_pair_sides(batch)
    logp = sequence_logprobs(
        token_logprobs(model, both["input_ids"], both["attention_mask"]), both["response_mask"]
    )
    batch["chosen_ref_logprobs"], batch["rejected_ref_logprobs"] = logp.detach().chunk(2)
    loss, stats = DPOLoss(beta=0.5)(model, batch)
    assert math.isclose(float(loss.detach()), 2 * math.log(2), rel_tol=1e-5)  # -log sigmoid(0)
    assert (
        float(stats["preference_accuracy"]) == 0 and abs(float(stats["preference_margin"])) < 1e-5
    )
    assert float(DPOLoss(0.5).normalizer(batch)) == 2
    loss.backward()  # the gradient raises chosen and lowers rejected log-probs
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_dpo_margin_scales_with_beta_and_the_log_ratio_gap():
    m = dpo_margin(
        torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), 0.1
    )
    torch.testing.assert_close(m, torch.tensor([0.1 * ((-1 + 2) - (-3 + 2))]))


def test_bradley_terry_reads_the_last_token_and_counts_pairs_ranked_right():
    model = build_scalar_model(SMALL, TOK.vocab_size, seed=0)
    batch = encode_preference_pairs(TOK, PAIRS)
    loss, stats = BradleyTerryLoss()(model, batch)
    both = stack_pair_sides(batch)
    rewards = last_token_values(
        model(both["input_ids"], both["attention_mask"]), both["attention_mask"]
    )
    chosen, rejected = rewards.chunk(2)
    expected = -torch.nn.functional.logsigmoid(chosen - rejected).sum()
    torch.testing.assert_close(loss, expected)
    assert float(stats["preference_accuracy"]) == float((chosen > rejected).sum())
    torch.testing.assert_close(stats["preference_margin"], (chosen - rejected).sum().detach())


# -- PPO's value loss and distillation's KL --------------------------------------------------------


def test_value_loss_is_half_squared_error_and_clips_a_value_moved_too_far():
    from nemo_rl.algorithms.loss_functions import clipped_value_loss

    ret, old, mask = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.ones(1, 1)
    near = torch.tensor([[0.1]], requires_grad=True)
    loss, stats = clipped_value_loss(near, old, ret, mask, value_clip=0.2)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.5 * 0.81) and float(near.grad) == pytest.approx(
        -0.9
    )
    assert float(stats["value_clip_fraction"]) == 0
    # Moved 0.5 past the rollout's value, away from the target: the clipped (larger) error counts
    # and gives no gradient, so the value is not pushed further from where the rollout saw it.
    far = torch.tensor([[-0.5]], requires_grad=True)
    loss, stats = clipped_value_loss(far, old, ret, mask, value_clip=0.2)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.5 * 1.5**2) and float(far.grad) == pytest.approx(
        -1.5
    )
    far2 = torch.tensor([[0.5]], requires_grad=True)  # moved 0.5 toward the target: clipped error
    loss, stats = clipped_value_loss(far2, old, ret, mask, value_clip=0.2)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.5 * 0.8**2) and float(far2.grad) == 0.0
    assert float(stats["value_clip_fraction"]) == 1


def test_reverse_kl_is_zero_for_equal_distributions_and_matches_the_formula():
    from nemo_rl.algorithms.loss_functions import reverse_kl

    p = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    q = torch.log(torch.tensor([[0.25, 0.5, 0.25]]))
    assert float(reverse_kl(p, p)) == pytest.approx(0.0, abs=1e-7)
    expected = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    assert float(reverse_kl(p, q)) == pytest.approx(expected)
    assert float(reverse_kl(q, p)) > 0
