import pytest
import torch

from nemo_rl.algorithms.advantages import group_normalized_advantages


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
