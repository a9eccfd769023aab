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

from nemo_rl.algorithms.advantages import state_values
from nemo_rl.data.pairs import PAIR_SIDES, stack_pair_sides
from nemo_rl.models.causal_lm import last_token_values, next_token_logprobs, token_logprobs

__all__ = [
    "BradleyTerryLoss",
    "ClippedPGLoss",
    "ClippedPGLossConfig",
    "ClippedValueLoss",
    "ClippedValueLossConfig",
    "DPOLoss",
    "NLLLoss",
    "TeacherKLLoss",
    "clipped_pg_loss",
    "clipped_value_loss",
    "dpo_margin",
    "kl_penalty",
    "reverse_kl",
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


# -- PPO's value function --------------------------------------------------------------------------


class ClippedValueLossConfig(BaseModel):
    """Coefficients of PPO's clipped value loss."""

    model_config = ConfigDict(extra="forbid")

    value_clip: float = Field(0.2, ge=0.0)
    """A new value may move at most this far from the rollout's value before its error stops
    counting more (PPO2's value clipping); 0 turns clipping off."""


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns ``(loss_sum, stats)`` summed over masked tokens.

    Per token ``0.5 * max((V - R)^2, (V_clip - R)^2)`` with ``V_clip = V_old + clip(V - V_old,
    -c, c)``: a value already moved ``c`` past the rollout's gets no further push in the same
    direction. ``stats`` holds the token sums of the clipped-token count (``value_clip_fraction``).
    """
    mask = mask.to(values.dtype)
    error = (values - returns) ** 2
    if value_clip > 0:
        clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped_error = (clipped - returns) ** 2
        per_token = 0.5 * torch.maximum(error, clipped_error)
        was_clipped = (clipped_error > error).to(mask.dtype)
    else:
        per_token, was_clipped = 0.5 * error, torch.zeros_like(error)
    stats = {"value_clip_fraction": (was_clipped * mask).sum().detach()}
    return (per_token * mask).sum(), stats


@dataclass(frozen=True)
class ClippedValueLoss:
    """:func:`clipped_value_loss` of a ``head: scalar`` model over the response tokens, as a
    ``LossFunction``.

    Reads ``input_ids``, ``attention_mask``, ``response_mask``, ``values`` (the rollout's, from
    :func:`~nemo_rl.algorithms.advantages.state_values`) and ``returns``; token-mean.
    """

    cfg: ClippedValueLossConfig
    required_keys: frozenset[str] = frozenset(
        {"input_ids", "attention_mask", "response_mask", "values", "returns"}
    )

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return batch["response_mask"].sum()

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        values = state_values(model(batch["input_ids"], batch["attention_mask"]))
        return clipped_value_loss(
            values, batch["values"], batch["returns"], batch["response_mask"], self.cfg.value_clip
        )


# -- on-policy distillation ------------------------------------------------------------------------


def reverse_kl(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """Returns ``[..]`` KL(student || teacher) over the last (vocabulary) dimension of two
    log-softmax tensors: ``sum_v p_s(v) * (log p_s(v) - log p_t(v))``, non-negative."""
    return (student_logprobs.exp() * (student_logprobs - teacher_logprobs)).sum(-1)


@dataclass(frozen=True)
class TeacherKLLoss:
    """Per-token reverse KL(student || teacher) over the whole vocabulary, at every response
    position of the student's own samples, as a ``LossFunction``.

    On-policy distillation: the states are the student's (it generated them), the target at each
    is the teacher's full next-token distribution. The exact KL over the (small) vocabulary is
    used rather than the one-sample estimate ``log p_s(y) - log p_t(y)`` of the sampled token:
    it needs no policy-gradient estimator, has no sampling variance, and costs only ``[B, T, V]``
    teacher log-probs, which for a character vocabulary is a few kilobytes. Reverse (mode-seeking)
    KL is the on-policy choice: it penalises the student for putting mass where the teacher
    puts none, on the very prefixes the student visits.

    Reads ``input_ids``, ``attention_mask``, ``response_mask`` and ``teacher_logprobs``
    (``[B, T, V]``, row ``t`` the teacher's distribution of token ``t``); token-mean.
    """

    temperature: float = 1.0
    """The sampler's temperature, applied to the student's logits as in the rollout."""
    required_keys: frozenset[str] = frozenset(
        {"input_ids", "attention_mask", "response_mask", "teacher_logprobs"}
    )

    def normalizer(self, batch: Batch) -> torch.Tensor:
        return batch["response_mask"].sum()

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        student = next_token_logprobs(
            model, batch["input_ids"], batch["attention_mask"], self.temperature
        )
        mask = batch["response_mask"].to(student.dtype)
        kl = reverse_kl(student, batch["teacher_logprobs"]) * mask
        return kl.sum(), {"kl_to_teacher": kl.sum().detach()}
