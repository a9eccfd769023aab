"""Turning rewards into advantages."""

from __future__ import annotations

import torch

__all__ = ["group_normalized_advantages"]


def group_normalized_advantages(
    rewards: torch.Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Returns ``[B]`` GRPO advantages: each reward minus its group's mean, over the group's std.

    Rows ``[k*group_size, (k+1)*group_size)`` are the responses to prompt ``k``. A group whose
    rewards are all equal gets zero advantages (nothing to learn from it). The std is the
    unbiased one, as in the GRPO paper. Raises ``ValueError`` if ``B`` is not a multiple of
    ``group_size``.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}"
        )
    grouped = rewards.float().view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_std and group_size > 1:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)
