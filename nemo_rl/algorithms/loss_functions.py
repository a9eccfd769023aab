"""The losses the algorithms hand to the policy worker (each a ``LossFunction``).

A loss is a small picklable object: the batch keys it reads, the count it is averaged over,
and ``(loss_sum, stat_sums)`` for a micro-batch. It returns *sums*; the worker divides by the
normalizer of the whole (mini-)batch, so micro-batching does not change the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field

from nemo_rl.models.causal_lm import token_logprobs

__all__ = ["ClippedPGLoss", "ClippedPGLossConfig", "clipped_pg_loss", "kl_penalty"]

Batch = dict[str, torch.Tensor]


class ClippedPGLossConfig(BaseModel):
    """Coefficients of the clipped policy-gradient loss (GRPO's, and PPO's policy loss)."""

    model_config = ConfigDict(extra="forbid")

    ratio_clip_min: float = Field(0.2, ge=0.0, lt=1.0)
    """The probability ratio is clipped below at ``1 - ratio_clip_min``."""
    ratio_clip_max: float = Field(0.2, ge=0.0)
    """The probability ratio is clipped above at ``1 + ratio_clip_max``."""
    reference_policy_kl_penalty: float = Field(0.05, ge=0.0)
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

    ``advantages`` is ``[B]`` (one per sequence, as GRPO assigns) or ``[B, T]`` (per token, as
    PPO's GAE gives). The loss per token is ``-min(ratio * A, clip(ratio) * A) + beta * kl``;
    ``stats`` holds token sums of the PG term (``pg_loss``), the KL term (``kl``) and the
    clipped-token count (``clip_fraction``), all detached.
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
        "pg_loss": (pg * mask).sum().detach(),
        "kl": (kl * mask).sum().detach(),
        "clip_fraction": (((ratio - clipped).abs() > 0).to(mask.dtype) * mask).sum().detach(),
    }
    return loss, stats


@dataclass(frozen=True)
class ClippedPGLoss:
    """:func:`clipped_pg_loss` over the response tokens of a sampled batch, as a ``LossFunction``.

    Reads ``input_ids``, ``attention_mask``, ``response_mask``, ``advantages``,
    ``prev_logprobs`` and ``ref_logprobs``; token-mean over response tokens.
    """

    cfg: ClippedPGLossConfig
    temperature: float = 1.0
    """The sampler's temperature, so log-probs match the ones the rollout was drawn with."""
    required_keys: frozenset[str] = frozenset(
        {"input_ids", "attention_mask", "response_mask", "advantages"}
        | {"prev_logprobs", "ref_logprobs"}
    )

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return batch["response_mask"].sum()

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        logprobs = token_logprobs(
            model, batch["input_ids"], batch["attention_mask"], self.temperature
        )
        return clipped_pg_loss(
            logprobs,
            batch["prev_logprobs"],
            batch["ref_logprobs"],
            batch["advantages"],
            batch["response_mask"],
            self.cfg,
        )
