"""GRPO, synchronous: sample a group of responses per prompt, score them, push the policy toward
the better ones in its group.

Reads top to bottom: the config, ``setup`` (tokenizer, task, data, Ray workers, resume), then
``grpo_train`` whose every phase is one ``with timer.span("rl.grpo.<phase>")`` block named as in
``schemas/span_groups.yaml`` (the timing key and the span are the same name). Shared math lives
in ``loss_functions.py`` and ``advantages.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import Field

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms.advantages import group_normalized_advantages
from nemo_rl.algorithms.common import LoopConfig, RunConfig, RunResult, RunSummary, Task
from nemo_rl.algorithms.loss_functions import ClippedPGLoss, ClippedPGLossConfig
from nemo_rl.data import PromptIterator
from nemo_rl.environments import Problem
from nemo_rl.models.generation.group import GenerationGroup
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.policy import PolicyGroup, SharedBatch
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer
from spanspec.export import TelemetryCost

__all__ = [
    "GRPOConfig",
    "GRPOSetup",
    "MasterConfig",
    "RolloutRunConfig",
    "grpo_train",
    "run",
    "setup",
    "step_metrics",
    "teardown",
    "validate",
]


# -- config -------------------------------------------------------------------------------------


class GRPOConfig(LoopConfig):
    """The outer loop (``max_steps``, ``val_period``, ``val_at_start``, ``seed``: see ``LoopConfig``)."""

    num_prompts_per_step: int = Field(32, ge=1)
    """Distinct prompts per step."""
    num_generations_per_prompt: int = Field(8, ge=2)
    """Responses sampled per prompt: the group whose rewards are normalised together."""
    normalize_rewards: bool = True
    """Divide each group's centred rewards by the group's std (the GRPO paper's advantage)."""
    loss: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    """Coefficients of the clipped policy-gradient loss."""


class RolloutRunConfig(RunConfig):
    """The blocks of a run that samples from its policy, all but the loop's own section (shared
    by GRPO and async GRPO): ``RunConfig``'s and ``generation``."""

    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """How responses are sampled."""


class MasterConfig(RolloutRunConfig):
    """A whole GRPO run: ``examples/configs/grpo_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "grpo"

    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    """The outer loop."""

    def ranks(self) -> list[common.Ranks]:
        """The policy ranks and the generation ranks."""
        g = self.grpo
        return common.rollout_ranks(
            "grpo",
            g.num_prompts_per_step,
            g.num_generations_per_prompt,
            {"policy": self.policy},
            self.generation,
        )


# -- setup --------------------------------------------------------------------------------------


@dataclass
class GRPOSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    task: Task
    train_data: PromptIterator[Problem]
    policy: PolicyGroup
    """The policy's ranks (with its frozen reference)."""
    generation: GenerationGroup
    """The generation ranks."""
    checkpoints: CheckpointManager | None
    logger: Logger
    """Opened at ``start_step``."""
    start_step: int = 0
    """Steps already done: those of the checkpoint the run resumed from, else 0."""
    timer: Timer = field(default_factory=Timer)


def setup(cfg: MasterConfig) -> GRPOSetup:
    """Builds the task, the data and the Ray workers, resumes from the latest checkpoint when
    there is one, and opens the logger at the step it resumed from; returns the ``GRPOSetup``.

    Starts (or joins) Ray if needed. Raises whatever a worker raises while starting.
    """
    common.start_ray(cfg)
    seed, temperature = cfg.grpo.seed, cfg.generation.temperature
    task = common.make_task(cfg, seed)
    timer = Timer()
    with timer.span("rl.grpo.model_init", **{"rl.model": cfg.policy.label}):
        loss = ClippedPGLoss(cfg.grpo.loss, temperature=temperature)
        vocab = task.tokenizer.vocab_size
        policy = common.spawn_policy(cfg.policy, cfg.cluster, vocab, seed, loss, temperature)
        generation = common.spawn_policy_generation(cfg, task, seed, policy)
    train_data = PromptIterator(task.train, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.grpo.load_checkpoint", **common.resume_attributes(latest)):
            workers = {"policy": policy}
            start_step = common.restore_checkpoint(latest, workers, generation, train_data)
    logger = common.open_logger(cfg.logger, "grpo", cfg.grpo.max_steps, start_step, latest)
    return GRPOSetup(
        cfg, task, train_data, policy, generation, checkpoints, logger, start_step, timer
    )


def teardown(s: GRPOSetup) -> list[TelemetryCost]:
    """Flushes the workers' telemetry, stops them and closes the logger; returns what each
    worker's telemetry cost."""
    return common.close_run(s.logger, s.policy, s.generation)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.grpo.job`` span: setup, train, teardown."""
    with spanspec.span("rl.grpo.job", **job_attributes):
        return common.train_in_job(cfg, setup, grpo_train, teardown)


# -- the loop -----------------------------------------------------------------------------------


def grpo_train(s: GRPOSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. grpo.max_steps`` (numbered from 1); returns a summary of the run.

    The summary's ``curves["reward"]`` holds the mean reward of each step run, its
    ``validation`` the held-out ``accuracy``. Every metric also goes to ``<log_dir>/metrics.jsonl``.
    """
    cfg, timer, grpo = s.cfg, s.timer, s.cfg.grpo
    P, G = grpo.num_prompts_per_step, grpo.num_generations_per_prompt
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "grpo", s.start_step, grpo.max_steps):
        return summary
    if grpo.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, {"accuracy": validate(s, iteration=0)})
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, grpo.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        # input.value / output.value: what a trace list (Phoenix) shows, so steps differ there.
        with timer.span(
            "rl.grpo.step", **it, **{"rl.algorithm": "grpo", "input.value": f"grpo step {step}"}
        ) as step_span:
            # DATA: P prompts, each repeated G times; the group of a prompt sits in adjacent rows.
            with timer.span("rl.grpo.data_processing", **it, **common.batch_attributes(P, G)):
                problems, input_ids, attention_mask = common.draw_prompts(
                    s.task, s.train_data, P, G
                )

            # ROLLOUT: sample responses, then score them.
            with timer.span(
                "rl.grpo.rollout",
                **it,
                **{"rl.num_generations_per_prompt": G, "rl.batch_size": P * G},
            ):
                with timer.span("rl.grpo.generation", **it, **{"rl.batch_size": P * G}) as span:
                    # The sampling seed depends only on the step, so a resumed run samples alike.
                    seed = common.step_seed(grpo.seed, step)
                    out = s.generation.generate(input_ids, attention_mask, seed=seed)
                    num_tokens = common.num_tokens(out)
                    spanspec.annotate(span, **{"rl.num_tokens": num_tokens})
                with timer.span("rl.grpo.reward", **it) as span:
                    rewards, exact = common.score_responses(
                        s.task, out, problems, input_ids.shape[1]
                    )
                    spanspec.annotate(span, **{"rl.reward.mean": float(rewards.mean())})

            batch = common.response_batch(out)
            shared = SharedBatch(batch)  # sent once, read by both log-prob passes

            # LOGPROBS of the sampled tokens under the policy that will be updated ...
            with timer.span("rl.grpo.logprob", **it, **{"rl.batch_size": P * G}):
                batch["prev_logprobs"] = s.policy.get_logprobs(shared)
            # ... and under the frozen reference, for the KL penalty.
            with timer.span("rl.grpo.reference_policy", **it, **{"rl.batch_size": P * G}):
                batch["ref_logprobs"] = s.policy.get_reference_logprobs(shared)

            # ADVANTAGE: each response's reward against its own group.
            with timer.span("rl.grpo.advantage", **it):
                batch["advantages"] = group_normalized_advantages(
                    rewards, G, normalize_std=grpo.normalize_rewards
                )

            # POLICY UPDATE: clipped policy gradient with a KL penalty, in micro-batches.
            with timer.span("rl.grpo.policy_update", **it, **{"rl.batch_size": P * G}) as span:
                train_metrics = s.policy.train(batch)
                spanspec.annotate(
                    span, **{"rl.num_micro_batches": train_metrics["num_micro_batches"]}
                )
            spanspec.annotate(
                step_span,
                **{
                    "output.value": f"reward {float(rewards.mean()):.3f}, "
                    f"loss {float(train_metrics['loss']):.4f}"
                },
            )

            # WEIGHT SYNC: the generation worker samples from the updated policy next step.
            with timer.span("rl.grpo.weight_sync", **it) as span:
                num_bytes = common.sync_weights(s.generation, s.policy)
                spanspec.annotate(span, **{"rl.weight_sync.num_bytes": num_bytes})

            if common.is_due(step, grpo.val_period):
                accuracy = validate(s, iteration=step)
                common.log_validation(s.logger, summary, step, {"accuracy": accuracy})
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, grpo.max_steps
            ):
                save_checkpoint(s, iteration=step)

        # LOG: after the step span closed, so the step's own time is known.
        timing = timer.take()
        metrics = step_metrics(rewards, exact, out["response_mask"], train_metrics, num_tokens)
        common.log_step(s.logger, step, metrics, timing, timing["rl.grpo.step"], train_metrics)
        summary.add({"reward": metrics["reward_mean"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: GRPOSetup, iteration: int) -> float:
    """Returns greedy exact-match accuracy on the held-out problems (one ``rl.grpo.evaluate`` span)."""
    problems = s.task.val
    with s.timer.span(
        "rl.grpo.evaluate", **{"rl.iteration": iteration, "rl.eval.num_samples": len(problems)}
    ) as span:
        accuracy = common.exact_match(s.generation, s.task, problems)
        spanspec.annotate(span, **{"rl.eval.accuracy": accuracy})
    return accuracy


def save_checkpoint(s: GRPOSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (model, optimiser, data position, step, RNG);
    returns its folder."""
    assert s.checkpoints is not None
    with s.timer.span(
        "rl.grpo.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)
    ):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.policy}, data)


def step_metrics(
    rewards: torch.Tensor,
    exact: float,
    response_mask: torch.Tensor,
    train_metrics: dict[str, float],
    num_tokens: int,
) -> dict[str, float]:
    """Returns the ``train/`` metrics of a step: reward statistics, exact-match share, response
    length, the policy worker's loss statistics, and tokens (``common.log_step`` adds tokens per
    second)."""
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "accuracy": exact,
        "response_length": float(response_mask.sum(-1).float().mean()),
        **{
            k: train_metrics[k]
            for k in ("loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "lr")
        },
        "num_tokens": num_tokens,
    }
