import pytest
import torch

from nemo_rl.algorithms.advantages import (
    explained_variance,
    gae_advantages,
    group_normalized_advantages,
    masked_whiten,
    state_values,
)


def test_group_normalisation_numbers():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    adv = group_normalized_advantages(rewards, group_size=4)
    # group 1: mean 0.5, unbiased std sqrt(1/3)
    expected = 0.5 / (1 / 3) ** 0.5
    torch.testing.assert_close(
        adv[:4], torch.tensor([expected, -expected, -expected, expected]), atol=1e-5, rtol=1e-5
    )
    # group 2: all equal, nothing to learn
    assert adv[4:].abs().max() == 0


def test_without_std_normalisation_only_centres():
    adv = group_normalized_advantages(torch.tensor([3.0, 1.0]), group_size=2, normalize_std=False)
    assert adv.tolist() == [1.0, -1.0]


def test_batch_must_split_into_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        group_normalized_advantages(torch.zeros(6), group_size=4)


# -- GAE (PPO) -------------------------------------------------------------------------------------

# Two rows: prompt in columns 0-1, responses of 3 and 2 tokens (row 1 stopped early).
MASK = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 1, 1, 0]])
VALUES = torch.tensor([[0.0, 0.0, 0.2, 0.4, 0.6], [0.0, 0.0, 0.5, 0.3, 9.0]])
REWARDS = torch.tensor([1.0, 0.0])


def test_gae_with_lambda_one_is_the_return_minus_the_value():
    adv, ret = gae_advantages(REWARDS, VALUES, MASK, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv[0, 2:], torch.tensor([0.8, 0.6, 0.4]))
    torch.testing.assert_close(adv[1, 2:4], torch.tensor([-0.5, -0.3]))
    # The returns are the reward at every response token; nothing outside the mask.
    torch.testing.assert_close(ret, torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0.0]]))
    assert adv[1, 4] == 0 and adv[:, :2].abs().max() == 0  # the 9.0 past the end never counts


def test_gae_with_lambda_zero_is_the_one_step_td_error_and_gamma_discounts():
    adv, _ = gae_advantages(REWARDS, VALUES, MASK, gamma=0.5, lam=0.0)
    # delta_t = r_t + gamma * V_{t+1} - V_t, V after the last token = 0
    torch.testing.assert_close(adv[0, 2:], torch.tensor([0.5 * 0.4 - 0.2, 0.5 * 0.6 - 0.4, 0.4]))
    torch.testing.assert_close(adv[1, 2:4], torch.tensor([0.5 * 0.3 - 0.5, -0.3]))


def test_state_values_shift_right_and_whitening_and_explained_variance():
    torch.testing.assert_close(
        state_values(torch.tensor([[1.0, 2.0, 3.0]])), torch.tensor([[0.0, 1.0, 2.0]])
    )
    x = masked_whiten(VALUES, MASK)
    picked = x[MASK.bool()]
    assert abs(float(picked.mean())) < 1e-6 and abs(float(picked.std(unbiased=False)) - 1) < 1e-3
    assert x[~MASK.bool()].abs().max() == 0
    ret = torch.tensor([[0, 0, 1.0, 2.0, 3.0]])
    m = torch.tensor([[0, 0, 1, 1, 1]])
    assert explained_variance(ret, ret, m) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(ret, 2.0), ret, m) == pytest.approx(0.0)
    assert explained_variance(ret, torch.ones_like(ret), m) == 0.0  # returns that do not vary
