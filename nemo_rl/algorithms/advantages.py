"""Turning rewards into advantages."""

from __future__ import annotations

import torch

__all__ = [
    "explained_variance",
    "gae_advantages",
    "group_normalized_advantages",
    "masked_whiten",
    "state_values",
]


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


def state_values(values: torch.Tensor) -> torch.Tensor:
    """Returns ``[B, T]`` values aligned with token log-probs: entry ``t`` is the value of the state
    *before* token ``t`` (the value model's output at position ``t - 1``); column 0 is 0.

    A value model reads position ``t`` after seeing tokens ``<= t``; the action at ``t`` is taken
    from the state that has seen tokens ``< t``, so the outputs shift right by one.
    """
    return torch.nn.functional.pad(values[:, :-1], (1, 0))


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(advantages, returns)``, both ``[B, T]`` and zero outside ``response_mask``.

    Generalised advantage estimation over each response's tokens: the sequence reward
    ``rewards[b]`` is paid on the last response token, ``values`` (``[B, T]``, aligned by
    :func:`state_values`) estimate the return from each token on, and the value after the last
    token is 0. ``delta_t = r_t + gamma * V_{t+1} - V_t``; ``A_t = sum_k (gamma * lam)^k
    delta_{t+k}``; ``returns = A + V`` (the value model's regression target). The response tokens
    of a row must be contiguous, as a generation backend lays them out.
    """
    mask = response_mask.to(values.dtype)
    batch, length = values.shape
    # The reward sits on each row's last response token.
    positions = torch.arange(length, device=values.device)
    last = (positions * response_mask.long()).argmax(-1)
    token_rewards = torch.zeros_like(values)
    token_rewards[torch.arange(batch), last] = rewards.to(values.dtype)
    token_rewards = token_rewards * mask
    advantages = torch.zeros_like(values)
    running = torch.zeros(batch, dtype=values.dtype, device=values.device)
    next_value = torch.zeros_like(running)
    for t in reversed(range(length)):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * m
        advantages[:, t] = running
        next_value = values[:, t] * m
    return advantages, (advantages + values) * mask


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Returns ``x`` shifted to mean 0 and scaled to std 1 over the masked entries (0 elsewhere)."""
    m = mask.to(x.dtype)
    n = m.sum().clamp(min=1)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / n
    return (x - mean) * torch.rsqrt(var + eps) * m


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """Returns ``1 - Var(returns - values) / Var(returns)`` over the masked tokens.

    1 is a perfect value model, 0 one no better than the mean return, negative a worse one; a
    batch whose returns do not vary gives 0.
    """
    m = mask.bool()
    target, pred = returns[m].float(), values[m].float()
    var = target.var(unbiased=False)
    if target.numel() < 2 or float(var) == 0.0:
        return 0.0
    return float(1.0 - (target - pred).var(unbiased=False) / var)
