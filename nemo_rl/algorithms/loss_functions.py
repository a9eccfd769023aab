"""The GRPO policy loss: a PPO-style clipped policy gradient plus a KL penalty to the reference.

All functions work on ``[B, T]`` per-token tensors with a ``mask`` marking response tokens, and
return *sums* over tokens; the caller divides by the token count of the whole (mini-)batch, so
micro-batching does not change the loss.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict

__all__ = ["ClippedPGLossConfig", "clipped_pg_loss", "kl_penalty"]


class ClippedPGLossConfig(BaseModel):
    """Coefficients of the GRPO loss."""

    model_config = ConfigDict(extra="forbid")

    ratio_clip_min: float = 0.2
    """The probability ratio is clipped below at ``1 - ratio_clip_min``."""
    ratio_clip_max: float = 0.2
    """The probability ratio is clipped above at ``1 + ratio_clip_max``."""
    reference_policy_kl_penalty: float = 0.05
    """Weight of the KL(policy || reference) term; from a random reference it also keeps entropy up."""


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Returns the per-token k3 estimate of KL(policy || reference): ``exp(r) - r - 1``, ``r = ref - logp``.

    Non-negative, zero when the two agree, and unbiased for samples drawn from the policy.
    """
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)  # exp() of a huge gap would overflow
    return log_ratio.exp() - log_ratio - 1.0


def clipped_pg_loss(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: ClippedPGLossConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns ``(loss_sum, stats)`` summed over masked tokens.

    ``advantages`` is ``[B]`` (one per sequence, as GRPO assigns) or ``[B, T]``. The loss per
    token is ``-min(ratio * A, clip(ratio) * A) + beta * kl``; ``stats`` holds token sums of the
    PG term, the KL term and the clipped-token count, all detached.
    """
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    ratio = (logprobs - prev_logprobs).exp()
    clipped = ratio.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)
    pg = -torch.minimum(ratio * advantages, clipped * advantages)
    kl = kl_penalty(logprobs, ref_logprobs)
    loss = ((pg + cfg.reference_policy_kl_penalty * kl) * mask).sum()
    stats = {
        "pg_loss_sum": (pg * mask).sum().detach(),
        "kl_sum": (kl * mask).sum().detach(),
        "clipped_tokens": (((ratio - clipped).abs() > 0).to(mask.dtype) * mask).sum().detach(),
    }
    return loss, stats
