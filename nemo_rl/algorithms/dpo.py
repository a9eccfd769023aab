"""DPO: push the policy's log-ratio to a frozen reference up on chosen answers, down on rejected.

Reads top to bottom like ``grpo.py``: the config, ``setup`` (task, preference pairs, the policy
worker holding the frozen reference, resume), then ``dpo_train`` whose phases are literal
``with timer.span("rl.dpo.<phase>")`` blocks named as in ``schemas/span_groups.yaml``. The pairs
are built in code from the arithmetic task (``nemo_rl.data.make_preference_pairs``): chosen is
the right sum, rejected a wrong one. Validation reports the held-out preference accuracy (pairs
whose implicit reward margin is positive) and the mean margin. What DPO shares with SFT and RM
(config blocks, ``SupervisedSetup``, teardown, the pairs' metrics) is in ``supervised.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import RunResult, RunSummary
from nemo_rl.algorithms.loss_functions import DPOLoss, dpo_margin, sequence_logprobs
from nemo_rl.algorithms.task import PAIR_ROLES
from nemo_rl.data import PromptIterator, encode_preference_pairs, stack_pair_sides
from nemo_rl.utils.timer import Timer

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
    DATA_ROLES: ClassVar[tuple[str, ...]] = PAIR_ROLES

    dpo: DPOConfig = Field(default_factory=DPOConfig)
    """The outer loop and the loss."""


# -- setup --------------------------------------------------------------------------------------


def setup(cfg: MasterConfig) -> sv.SupervisedSetup:
    """Builds the task, the pairs and the policy worker (with its frozen reference), resumes from
    the latest checkpoint when there is one, and opens the logger at the step it resumed from;
    returns the run's ``SupervisedSetup``. Starts (or joins) Ray if needed."""
    common.start_ray(cfg)
    seed = cfg.dpo.seed
    task = common.make_task(cfg, seed)
    timer = Timer()
    with timer.span("rl.dpo.model_init", **{"rl.model": cfg.policy.label}):
        loss, vocab = DPOLoss(cfg.dpo.beta), task.tokenizer.vocab_size
        policy = common.spawn_policy(cfg.policy, cfg.cluster, vocab, seed, loss, reference=True)
    train_pairs, val_pairs = sv.preference_data(task, cfg.dpo)
    train_data = PromptIterator(train_pairs, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.dpo.load_checkpoint", **common.resume_attributes(latest)):
            start_step = common.restore_checkpoint(latest, {"policy": policy}, None, train_data)
    logger = common.open_logger(cfg.logger, "dpo", cfg.dpo.max_steps, start_step, latest)
    return sv.SupervisedSetup(
        cfg, task, train_data, val_pairs, policy, checkpoints, logger, start_step, timer
    )


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.dpo.job`` span: setup, train, teardown."""
    with spanspec.span("rl.dpo.job", **job_attributes):
        return common.train_in_job(cfg, setup, dpo_train, sv.teardown)


# -- the loop -----------------------------------------------------------------------------------


def dpo_train(s: sv.SupervisedSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. dpo.max_steps`` (numbered from 1); returns the summary (``curves`` of
    ``loss`` and ``preference_accuracy``, ``validation`` with held-out ``accuracy`` and ``margin``)."""
    cfg, timer, dpo = s.cfg, s.timer, s.cfg.dpo
    size = dpo.batch_size
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "dpo", s.start_step, dpo.max_steps):
        return summary
    if dpo.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, validate(s, iteration=0))
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, dpo.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        with timer.span("rl.dpo.step", **it, **{"rl.algorithm": "dpo"}):
            # DATA: chosen and rejected completions of each prompt, one row per pair.
            with timer.span("rl.dpo.data_processing", **it, **{"rl.batch_size": size}):
                batch = encode_preference_pairs(s.task.tokenizer, s.train_data.next_batch(size))
            # REFERENCE: sequence log-probs of both sides under the frozen starting policy.
            with timer.span("rl.dpo.reference_policy", **it, **{"rl.batch_size": 2 * size}):
                ref = _pair_logprobs(s.policy.get_reference_logprobs, batch)
                batch["chosen_ref_logprobs"], batch["rejected_ref_logprobs"] = ref
            # POLICY UPDATE: -log sigmoid(margin) per pair, in micro-batches of pairs.
            with timer.span("rl.dpo.policy_update", **it, **{"rl.batch_size": size}) as span:
                metrics = s.policy.train(batch)
                spanspec.annotate(span, **{"rl.num_micro_batches": metrics["num_micro_batches"]})

            if common.is_due(step, dpo.val_period):
                common.log_validation(s.logger, summary, step, validate(s, iteration=step))
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, dpo.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        common.log_step(s.logger, step, metrics, timing, timing["rl.dpo.step"])
        summary.add(
            {"loss": metrics["loss"], "preference_accuracy": metrics["preference_accuracy"]}
        )
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: sv.SupervisedSetup, iteration: int) -> dict[str, float]:
    """Returns the held-out pairs' preference ``accuracy`` (margin > 0) and mean ``margin``."""
    attributes = {"rl.iteration": iteration, "rl.eval.num_samples": len(s.val_data)}
    with s.timer.span("rl.dpo.evaluate", **attributes) as span:
        batch = encode_preference_pairs(s.task.tokenizer, s.val_data)
        chosen, rejected = _pair_logprobs(s.policy.get_logprobs, batch)
        ref_chosen, ref_rejected = _pair_logprobs(s.policy.get_reference_logprobs, batch)
        margin = dpo_margin(chosen, rejected, ref_chosen, ref_rejected, s.cfg.dpo.beta)
        metrics = sv.preference_metrics(margin)
        spanspec.annotate(span, **{"rl.eval.accuracy": metrics["accuracy"]})
    return metrics


def save_checkpoint(s: sv.SupervisedSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration``; returns its folder. The reference needs
    none: it is the starting policy, rebuilt from the seed (or ``policy.checkpoint``)."""
    assert s.checkpoints is not None
    with s.timer.span(
        "rl.dpo.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)
    ):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.policy}, data)


def _pair_logprobs(
    method: Any, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    # One worker call over both sides; returns the [B] chosen and rejected sequence log-probs.
    both = stack_pair_sides(batch)
    logprobs = method(both)
    chosen, rejected = sequence_logprobs(logprobs, both["response_mask"]).chunk(2)
    return chosen, rejected
