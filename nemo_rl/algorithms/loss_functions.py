"""The losses the algorithms hand to the policy worker (each a ``LossFunction``).

A loss is a small picklable object: the batch keys it reads, the count it is averaged over,
and ``(loss_sum, stat_sums)`` for a micro-batch. It returns *sums*; the worker divides by the
normalizer of the whole (mini-)batch, so micro-batching does not change the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from nemo_rl.data.pairs import PAIR_SIDES, stack_pair_sides
from nemo_rl.models.causal_lm import last_token_values, token_logprobs

__all__ = [
    "BradleyTerryLoss",
    "ClippedPGLoss",
    "ClippedPGLossConfig",
    "DPOLoss",
    "NLLLoss",
    "clipped_pg_loss",
    "dpo_margin",
    "kl_penalty",
    "sequence_logprobs",
]

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


# -- supervised and preference losses -----------------------------------------------------------


def sequence_logprobs(logprobs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Returns ``[B]``: each row's token log-probs summed over its response tokens."""
    return (logprobs * response_mask.to(logprobs.dtype)).sum(-1)


def dpo_margin(
    chosen_logprobs: torch.Tensor,
    rejected_logprobs: torch.Tensor,
    chosen_ref_logprobs: torch.Tensor,
    rejected_ref_logprobs: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Returns ``[B]``: DPO's implicit reward margin ``beta * (log-ratio chosen - log-ratio rejected)``.

    Each argument is a ``[B]`` sequence log-prob; a log-ratio is policy minus reference. The
    margin is 0 while the policy equals the reference, positive once it prefers the chosen side.
    """
    return beta * (
        (chosen_logprobs - chosen_ref_logprobs) - (rejected_logprobs - rejected_ref_logprobs)
    )


def _pair_stats(loss: torch.Tensor, margin: torch.Tensor) -> tuple[torch.Tensor, Batch]:
    stats = {
        "preference_accuracy": (margin > 0).float().sum().detach(),
        "preference_margin": margin.sum().detach(),
    }
    return loss, stats


def _pairs(batch: Batch) -> torch.Tensor:
    return torch.tensor(float(batch["chosen_input_ids"].shape[0]))


_PAIR_KEYS = frozenset(
    f"{side}_{key}" for side in PAIR_SIDES for key in ("input_ids", "attention_mask")
)


@dataclass(frozen=True)
class NLLLoss:
    """Next-token negative log-likelihood over the response tokens (SFT), as a ``LossFunction``.

    Reads ``input_ids``, ``attention_mask`` and ``response_mask`` (1 on the answer and its eos);
    token-mean over the response tokens, so the prompt is context, never a target.
    """

    required_keys: frozenset[str] = frozenset({"input_ids", "attention_mask", "response_mask"})

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return batch["response_mask"].sum()

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        logprobs = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
        return -sequence_logprobs(logprobs, batch["response_mask"]).sum(), {}


@dataclass(frozen=True)
class DPOLoss:
    """The DPO loss ``-log sigmoid(margin)`` of :func:`dpo_margin`, per pair, as a ``LossFunction``.

    Reads the pair batch of ``nemo_rl.data.encode_preference_pairs`` plus ``chosen_ref_logprobs``
    and ``rejected_ref_logprobs`` (``[B]`` sequence log-probs under the frozen reference). Mean
    over pairs; reports the share of pairs with a positive margin and the mean margin.
    """

    beta: float
    """Strength of the implicit KL anchor to the reference; larger keeps the policy closer."""
    required_keys: frozenset[str] = _PAIR_KEYS | {
        "chosen_response_mask",
        "rejected_response_mask",
        "chosen_ref_logprobs",
        "rejected_ref_logprobs",
    }

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return _pairs(batch)

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        both = stack_pair_sides(batch)  # one forward over chosen and rejected rows
        logprobs = token_logprobs(model, both["input_ids"], both["attention_mask"])
        chosen, rejected = sequence_logprobs(logprobs, both["response_mask"]).chunk(2)
        margin = dpo_margin(
            chosen,
            rejected,
            batch["chosen_ref_logprobs"],
            batch["rejected_ref_logprobs"],
            self.beta,
        )
        return _pair_stats(-F.logsigmoid(margin).sum(), margin)


@dataclass(frozen=True)
class BradleyTerryLoss:
    """Bradley–Terry loss of a reward model, ``-log sigmoid(r_chosen - r_rejected)`` per pair.

    The model is a ``head: scalar`` model (``forward(ids, mask) -> [B, T]``); a sequence's reward
    is its value at the last attended token (its eos). Reads the pair batch of
    ``nemo_rl.data.encode_preference_pairs``; mean over pairs; reports the share of pairs ranked
    right and the mean reward gap.
    """

    required_keys: frozenset[str] = _PAIR_KEYS

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return _pairs(batch)

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        both = stack_pair_sides(batch)
        rewards = last_token_values(
            model(both["input_ids"], both["attention_mask"]), both["attention_mask"]
        )
        chosen, rejected = rewards.chunk(2)
        margin = chosen - rejected
        return _pair_stats(-F.logsigmoid(margin).sum(), margin)
