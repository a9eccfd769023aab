"""Reward model: the tiny Llama with a scalar head, trained Bradley–Terry on preference pairs.

Reads top to bottom like ``grpo.py``: the config, ``setup`` (task, preference pairs, the
reward-model worker, resume), then ``rm_train`` whose phases are literal
``with timer.span("rl.rm.<phase>")`` blocks named as in ``schemas/span_groups.yaml``. A sequence's reward is the model's value at its last
token; the loss pushes the chosen (right sum) above the rejected (a wrong sum). Validation is
pairwise accuracy on held-out pairs. A checkpoint's ``step_<n>/`` folder is the trained reward
model: ``PolicyConfig(head="scalar", checkpoint=".../step_<n>")`` loads it by path.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import RunResult, RunSummary
from nemo_rl.algorithms.loss_functions import BradleyTerryLoss
from nemo_rl.algorithms.task import PAIR_ROLES
from nemo_rl.data import PromptIterator, encode_preference_pairs, stack_pair_sides
from nemo_rl.models.causal_lm import last_token_values
from nemo_rl.models.policy import PolicyConfig
from nemo_rl.utils.timer import Timer

__all__ = ["MasterConfig", "RMConfig", "rm_train", "run", "setup", "validate"]


# -- config -------------------------------------------------------------------------------------


class RMConfig(sv.PairConfig):
    """The outer loop: ``batch_size`` preference pairs per step."""


class MasterConfig(sv.SupervisedRunConfig):
    """A whole reward-model run: ``examples/configs/rm_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "rm"
    DATA_ROLES: ClassVar[tuple[str, ...]] = PAIR_ROLES

    rm: RMConfig = Field(default_factory=RMConfig)
    """The outer loop."""
    policy: PolicyConfig = Field(default_factory=lambda: PolicyConfig(head="scalar"))
    """The reward model (``head: scalar``) and its optimiser."""

    @model_validator(mode="after")
    def _scalar_head(self) -> MasterConfig:
        if self.policy.head != "scalar":
            raise ValueError(
                f"policy.head={self.policy.head!r}: a reward model needs policy.head=scalar"
            )
        return self


# -- setup --------------------------------------------------------------------------------------


def setup(cfg: MasterConfig) -> sv.SupervisedSetup:
    """Builds the task, the pairs and the reward-model worker, resumes from the latest checkpoint
    when there is one, and opens the logger at the step it resumed from; returns the run's
    ``SupervisedSetup``. Starts (or joins) Ray if needed."""
    common.start_ray(cfg)
    seed = cfg.rm.seed
    task = common.make_task(cfg, seed)
    timer = Timer()
    with timer.span("rl.rm.model_init", **{"rl.model": cfg.policy.label}):
        loss, vocab = BradleyTerryLoss(), task.tokenizer.vocab_size
        model = common.spawn_policy(cfg.policy, cfg.cluster, vocab, seed, loss, reference=False)
    train_pairs, val_pairs = sv.preference_data(task, cfg.rm)
    train_data = PromptIterator(train_pairs, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.rm.load_checkpoint", **common.resume_attributes(latest)):
            start_step = common.restore_checkpoint(latest, {"policy": model}, None, train_data)
    logger = common.open_logger(cfg.logger, "rm", cfg.rm.max_steps, start_step, latest)
    return sv.SupervisedSetup(
        cfg, task, train_data, val_pairs, model, checkpoints, logger, start_step, timer
    )


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.rm.job`` span: setup, train, teardown."""
    with spanspec.span("rl.rm.job", **job_attributes):
        return common.train_in_job(cfg, setup, rm_train, sv.teardown)


# -- the loop -----------------------------------------------------------------------------------


def rm_train(s: sv.SupervisedSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. rm.max_steps`` (numbered from 1); returns the summary (``curves`` of
    ``loss`` and ``preference_accuracy``, ``validation`` with held-out ``accuracy`` and ``margin``)."""
    cfg, timer, rm = s.cfg, s.timer, s.cfg.rm
    size = rm.batch_size
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "rm", s.start_step, rm.max_steps):
        return summary
    if rm.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, validate(s, iteration=0))
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, rm.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        with timer.span("rl.rm.step", **it, **{"rl.algorithm": "rm"}):
            # DATA: chosen and rejected completions of each prompt, one row per pair.
            with timer.span("rl.rm.data_processing", **it, **{"rl.batch_size": size}):
                batch = encode_preference_pairs(s.task.tokenizer, s.train_data.next_batch(size))
            # UPDATE: -log sigmoid(r_chosen - r_rejected) per pair, in micro-batches.
            with timer.span("rl.rm.policy_update", **it, **{"rl.batch_size": size}) as span:
                metrics = s.policy.train(batch)
                spanspec.annotate(span, **{"rl.num_micro_batches": metrics["num_micro_batches"]})

            if common.is_due(step, rm.val_period):
                common.log_validation(s.logger, summary, step, validate(s, iteration=step))
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, rm.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        common.log_step(s.logger, step, metrics, timing, timing["rl.rm.step"])
        summary.add(
            {"loss": metrics["loss"], "preference_accuracy": metrics["preference_accuracy"]}
        )
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: sv.SupervisedSetup, iteration: int) -> dict[str, float]:
    """Returns the held-out pairs' ``accuracy`` (chosen scored above rejected) and the mean
    reward gap ``margin``."""
    attributes = {"rl.iteration": iteration, "rl.eval.num_samples": len(s.val_data)}
    with s.timer.span("rl.rm.evaluate", **attributes) as span:
        both = stack_pair_sides(encode_preference_pairs(s.task.tokenizer, s.val_data))
        values = s.policy.get_values(both)
        chosen, rejected = last_token_values(values, both["attention_mask"]).chunk(2)
        metrics = sv.preference_metrics(chosen - rejected)
        spanspec.annotate(span, **{"rl.eval.accuracy": metrics["accuracy"]})
    return metrics


def save_checkpoint(s: sv.SupervisedSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (a loadable reward model); returns its folder."""
    assert s.checkpoints is not None
    with s.timer.span("rl.rm.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.policy}, data)
