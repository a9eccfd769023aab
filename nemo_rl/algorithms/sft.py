"""SFT: next-token loss on prompt -> answer pairs of the arithmetic task, masked to the answer.

Reads top to bottom like ``grpo.py``: the config, ``setup`` (task, the policy worker and a
generation worker for greedy evaluation, resume), then ``sft_train`` whose every phase is one
literal ``with timer.span("rl.sft.<phase>")`` block named as in ``schemas/span_groups.yaml``.
Validation is greedy exact match on held-out problems: the generation worker gets the trained
weights, then answers every held-out prompt. What SFT shares with DPO and RM (config blocks,
``SupervisedSetup``, teardown) is in ``supervised.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import RunResult, RunSummary
from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.algorithms.task import SFT_ROLES
from nemo_rl.data import PromptIterator, encode_completions
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.utils.timer import Timer

__all__ = ["MasterConfig", "SFTConfig", "run", "setup", "sft_train", "validate"]


# -- config -------------------------------------------------------------------------------------


class SFTConfig(sv.SupervisedConfig):
    """The outer loop: ``batch_size`` problems per step, each trained on its answer."""


class MasterConfig(sv.SupervisedRunConfig):
    """A whole SFT run: ``examples/configs/sft_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "sft"
    DATA_ROLES: ClassVar[tuple[str, ...]] = SFT_ROLES

    sft: SFTConfig = Field(default_factory=SFTConfig)
    """The outer loop."""
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """The worker that answers held-out prompts greedily for validation."""

    def ranks(self) -> list[common.Ranks]:
        """The policy ranks and the generation ranks that validate."""
        return [
            *super().ranks(),
            common.Ranks("generation.num_workers", self.generation.num_workers),
        ]


# -- setup --------------------------------------------------------------------------------------


def setup(cfg: MasterConfig) -> sv.SupervisedSetup:
    """Builds the task, the policy and generation workers, resumes from the latest checkpoint
    when there is one, and opens the logger at the step it resumed from; returns the run's
    ``SupervisedSetup``. Starts (or joins) Ray if needed."""
    common.start_ray(cfg)
    seed = cfg.sft.seed
    task = common.make_task(cfg, seed)
    timer = Timer()
    with timer.span("rl.sft.model_init", **{"rl.model": cfg.policy.label}):
        vocab = task.tokenizer.vocab_size
        policy = common.spawn_policy(
            cfg.policy, cfg.cluster, vocab, seed, NLLLoss(), reference=False
        )
        generation = common.spawn_policy_generation(cfg, task, seed, policy)
    train_data = PromptIterator(task.train, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.sft.load_checkpoint", **common.resume_attributes(latest)):
            # The generation worker gets the trained weights when it validates.
            start_step = common.restore_checkpoint(latest, {"policy": policy}, None, train_data)
    logger = common.open_logger(cfg.logger, "sft", cfg.sft.max_steps, start_step, latest)
    return sv.SupervisedSetup(
        cfg, task, train_data, task.val, policy, checkpoints, logger, start_step, timer, generation
    )


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.sft.job`` span: setup, train, teardown."""
    with spanspec.span("rl.sft.job", **job_attributes):
        return common.train_in_job(cfg, setup, sft_train, sv.teardown)


# -- the loop -----------------------------------------------------------------------------------


def sft_train(s: sv.SupervisedSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. sft.max_steps`` (numbered from 1); returns the summary (``curves["loss"]``,
    ``validation`` with the held-out exact-match ``accuracy``)."""
    cfg, timer, sft = s.cfg, s.timer, s.cfg.sft
    size = sft.batch_size
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "sft", s.start_step, sft.max_steps):
        return summary
    if sft.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, validate(s, iteration=0))
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, sft.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        with timer.span("rl.sft.step", **it, **{"rl.algorithm": "sft"}):
            # DATA: <bos> prompt answer <eos>, the loss masked to the answer and its eos.
            with timer.span("rl.sft.data_processing", **it, **{"rl.batch_size": size}):
                problems = s.train_data.next_batch(size)
                prompts, answers = [p.prompt for p in problems], [p.answer for p in problems]
                batch = encode_completions(s.task.tokenizer, prompts, answers)
            # POLICY UPDATE: token-mean NLL of the answers, in micro-batches.
            with timer.span("rl.sft.policy_update", **it, **{"rl.batch_size": size}) as span:
                metrics = s.policy.train(batch)
                spanspec.annotate(span, **{"rl.num_micro_batches": metrics["num_micro_batches"]})

            if common.is_due(step, sft.val_period):
                common.log_validation(s.logger, summary, step, validate(s, iteration=step))
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, sft.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        common.log_step(s.logger, step, metrics, timing, timing["rl.sft.step"])
        summary.add({"loss": metrics["loss"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: sv.SupervisedSetup, iteration: int) -> dict[str, float]:
    """Returns ``{"accuracy": ...}``: greedy exact match on the held-out problems, answered by
    the generation worker after it received the trained weights."""
    attributes = {"rl.iteration": iteration, "rl.eval.num_samples": len(s.val_data)}
    with s.timer.span("rl.sft.evaluate", **attributes) as span:
        common.sync_weights(s.generation, s.policy)
        accuracy = common.exact_match(s.generation, s.task, s.val_data)
        spanspec.annotate(span, **{"rl.eval.accuracy": accuracy})
    return {"accuracy": accuracy}


def save_checkpoint(s: sv.SupervisedSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (model, optimiser, data position, RNG);
    returns its folder."""
    assert s.checkpoints is not None
    with s.timer.span(
        "rl.sft.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)
    ):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.policy}, data)
