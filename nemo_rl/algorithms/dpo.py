"""DPO: push the policy's log-ratio to a frozen reference up on chosen answers, down on rejected.

Reads top to bottom: the config, ``setup`` (task, preference pairs, the policy worker holding
the frozen reference, resume), then ``dpo_step`` whose phases are literal
``with timer.span("rl.dpo.<phase>")`` blocks named as in ``schemas/span_groups.yaml``. The pairs
are built in code from the arithmetic task (``nemo_rl.data.make_preference_pairs``): chosen is
the right sum, rejected a wrong one. Validation reports the held-out preference accuracy (pairs
whose implicit reward margin is positive) and the mean margin. The outer loop, logging and
checkpoint contents are shared with SFT and RM in ``supervised.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import ray
import torch
from pydantic import Field

import spanspec
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import RunSummary, spawn_policy, wait_ready
from nemo_rl.algorithms.loss_functions import DPOLoss, dpo_margin, sequence_logprobs
from nemo_rl.data import encode_preference_pairs, stack_pair_sides
from nemo_rl.distributed import call
from nemo_rl.utils.timer import annotate

__all__ = ["DPOConfig", "MasterConfig", "dpo_train", "run", "setup", "validate"]


# -- config -------------------------------------------------------------------------------------


class DPOConfig(sv.PairConfig):
    """The outer loop and the DPO loss: ``batch_size`` preference pairs per step."""

    beta: float = Field(0.5, gt=0.0)
    """Scale of the implicit reward ``beta * log(policy / reference)``; larger stays closer to
    the reference."""


class MasterConfig(sv.SupervisedRunConfig):
    """A whole DPO run: ``examples/configs/dpo_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "dpo"

    dpo: DPOConfig = Field(default_factory=DPOConfig)
    """The outer loop and the loss."""


# -- setup --------------------------------------------------------------------------------------


def setup(cfg: MasterConfig) -> sv.LoopState:
    """Builds the task, the pairs, the policy worker (with its frozen reference) and the logger,
    resuming from the latest checkpoint when there is one; returns the run's ``LoopState``."""
    task, timer = sv.prepare(cfg)
    with timer.span("rl.dpo.model_init", **{"rl.model": cfg.policy.model_name}):
        loss = DPOLoss(cfg.dpo.beta)
        vocab = task.tokenizer.vocab_size
        policy = spawn_policy(cfg.policy, cfg.cluster, vocab, cfg.dpo.seed, loss, reference=True)
        wait_ready(policy)
    pairs = sv.preference_data(task, cfg.dpo)
    return sv.start(cfg, PHASES, task, pairs, {"policy": policy}, timer)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunSummary:
    """The whole job inside its ``rl.dpo.job`` span: setup, train, teardown; returns the summary."""
    with spanspec.span("rl.dpo.job", **job_attributes):
        return sv.run_job(setup(cfg))


def dpo_train(s: sv.LoopState) -> RunSummary:
    """Runs steps ``s.start_step .. dpo.max_steps - 1``; returns the summary (``curves`` of
    ``loss`` and ``preference_accuracy``, ``validation`` with held-out ``accuracy`` and ``margin``)."""
    return sv.train(s)


# -- the phases ---------------------------------------------------------------------------------


def dpo_step(s: sv.LoopState, step: int) -> tuple[dict[str, float], dict[str, float] | None]:
    """One step: the next ``dpo.batch_size`` pairs, their reference log-probs, one DPO update."""
    size, it = s.section.batch_size, {"rl.iteration": step}
    with s.timer.span("rl.dpo.step", **it, **{"rl.algorithm": "dpo"}):
        # DATA: chosen and rejected completions of each prompt, one row per pair.
        with s.timer.span("rl.dpo.data_processing", **it, **{"rl.batch_size": size}):
            batch = encode_preference_pairs(s.task.tokenizer, s.train_data.next_batch(size))
        # REFERENCE: sequence log-probs of both sides under the frozen starting policy.
        with s.timer.span("rl.dpo.reference_policy", **it, **{"rl.batch_size": 2 * size}):
            ref = _pair_logprobs(s.policy.get_reference_logprobs, batch)
            batch["chosen_ref_logprobs"], batch["rejected_ref_logprobs"] = ref
        # POLICY UPDATE: -log sigmoid(margin) per pair, in micro-batches of pairs.
        with s.timer.span("rl.dpo.policy_update", **sv.update_attributes(s, step)):
            metrics = sv.train_on(s, batch)
        return metrics, sv.end_of_step(s, step)


def validate(s: sv.LoopState, iteration: int) -> dict[str, float]:
    """Returns the held-out pairs' preference ``accuracy`` (margin > 0) and mean ``margin``."""
    with s.timer.span("rl.dpo.evaluate", **sv.eval_attributes(s, iteration)) as span:
        batch = encode_preference_pairs(s.task.tokenizer, s.val_data)
        chosen, rejected = _pair_logprobs(s.policy.get_logprobs, batch)
        ref_chosen, ref_rejected = _pair_logprobs(s.policy.get_reference_logprobs, batch)
        margin = dpo_margin(chosen, rejected, ref_chosen, ref_rejected, s.section.beta)
        metrics = sv.preference_metrics(margin)
        annotate(span, **{"rl.eval.accuracy": metrics["accuracy"]})
    return metrics


def save_checkpoint(s: sv.LoopState, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration``; returns its folder. The reference needs
    none: it is the starting policy, rebuilt from the seed (or ``policy.checkpoint``)."""
    with s.timer.span("rl.dpo.checkpoint", **sv.checkpoint_attributes(s, iteration)):
        return sv.store(s, iteration)


def load_checkpoint(s: sv.LoopState, path: str) -> None:
    """Restores the checkpoint at ``path``; sets ``s.start_step``."""
    with s.timer.span("rl.dpo.load_checkpoint", **sv.load_attributes(path)):
        sv.restore(s, path)


def _pair_logprobs(
    method: Any, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    # One worker call over both sides; returns the [B] chosen and rejected sequence log-probs.
    both = stack_pair_sides(batch)
    logprobs = ray.get(call(method, both))
    chosen, rejected = sequence_logprobs(logprobs, both["response_mask"]).chunk(2)
    return chosen, rejected


PHASES = sv.Phases(
    dpo_step, validate, save_checkpoint, load_checkpoint, headline=("loss", "preference_accuracy")
)
