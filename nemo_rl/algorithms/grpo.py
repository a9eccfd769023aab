"""GRPO, synchronous: sample a group of responses per prompt, score them, push the policy toward
the better ones in its group.

Reads top to bottom: the config, ``setup`` (tokenizer, task, data, Ray workers, resume), then
``grpo_train`` whose every phase is one ``with timer.span("rl.grpo.<phase>")`` block named as in
``schemas/span_groups.yaml`` (the timing key and the span are the same name). Shared math lives
in ``loss_functions.py`` and ``advantages.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from pydantic import Field

import spanspec
from nemo_rl.algorithms.advantages import group_normalized_advantages
from nemo_rl.algorithms.common import (
    ClusterConfig,
    EnvConfig,
    LoopConfig,
    RunConfig,
    RunSummary,
    Task,
    checkpoint_manager,
    encode_prompts,
    exact_match,
    log_step,
    log_validation,
    make_task,
    nothing_left,
    num_micro_batches,
    response_batch,
    restore_checkpoint,
    score_responses,
    spawn_policy,
    spawn_policy_generation,
    step_seed,
    stop_workers,
    sync_weights,
    train_in_job,
    wait_ready,
    write_checkpoint,
)
from nemo_rl.algorithms.loss_functions import ClippedPGLoss, ClippedPGLossConfig
from nemo_rl.data import PromptIterator
from nemo_rl.distributed import call, init_ray
from nemo_rl.environments import Problem
from nemo_rl.models.generation.interface import GenerationConfig, GenerationOutput
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer, annotate

__all__ = [
    "ClusterConfig",
    "EnvConfig",
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

    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    """The outer loop."""


# -- setup --------------------------------------------------------------------------------------


@dataclass
class GRPOSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    task: Task
    train_data: PromptIterator[Problem]
    policy: Any
    """Ray actor handle of a ``PolicyWorker``."""
    generation: Any
    """Ray actor handle of a ``GenerationInterface`` backend."""
    logger: Logger
    checkpoints: CheckpointManager | None
    start_step: int = 0
    timer: Timer = field(default_factory=Timer)


def setup(cfg: MasterConfig) -> GRPOSetup:
    """Builds the task, the data, the Ray workers and the logger, and resumes from the latest
    checkpoint when there is one; returns the ``GRPOSetup``.

    Starts (or joins) Ray if needed. Raises whatever a worker raises while starting.
    """
    init_ray(num_cpus=cfg.cluster.num_cpus, address=cfg.cluster.address)
    task = make_task(cfg.env, cfg.grpo.seed)
    timer = Timer()
    with timer.span("rl.grpo.model_init", **{"rl.model": cfg.policy.model_name}):
        loss = ClippedPGLoss(cfg.grpo.loss, temperature=cfg.generation.temperature)
        vocab = task.tokenizer.vocab_size
        policy = spawn_policy(
            cfg.policy, cfg.cluster, vocab, cfg.grpo.seed, loss, cfg.generation.temperature
        )
        generation = spawn_policy_generation(cfg, task, cfg.grpo.seed, policy)
        wait_ready(policy, generation)
    s = GRPOSetup(
        cfg=cfg,
        task=task,
        train_data=PromptIterator(task.train, seed=cfg.grpo.seed),
        policy=policy,
        generation=generation,
        logger=None,  # type: ignore[arg-type]  # made below, once the start step is known
        checkpoints=checkpoint_manager(cfg.checkpointing, cfg.logger),
        timer=timer,
    )
    if s.checkpoints is not None and (latest := s.checkpoints.latest()) is not None:
        load_checkpoint(s, latest)
    s.logger = Logger(cfg.logger, cfg.grpo.max_steps, initial_step=s.start_step, desc="grpo")
    return s


def teardown(s: GRPOSetup) -> None:
    """Flushes the workers' telemetry, stops them and closes the logger."""
    stop_workers(s.policy, s.generation)
    if s.logger is not None:
        s.logger.close()


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunSummary:
    """The whole job inside its ``rl.grpo.job`` span: setup, train, teardown; returns the summary."""
    with spanspec.span("rl.grpo.job", **job_attributes):
        return train_in_job(cfg, setup, grpo_train, teardown)


# -- the loop -----------------------------------------------------------------------------------


def grpo_train(s: GRPOSetup) -> RunSummary:
    """Runs steps ``s.start_step .. grpo.max_steps - 1``; returns a summary of the run.

    The summary's ``curves["reward"]`` holds the mean reward of each step run, its
    ``validation`` the held-out ``accuracy``. Every metric also goes to ``<log_dir>/metrics.jsonl``.
    """
    cfg, timer = s.cfg, s.timer
    P, G = cfg.grpo.num_prompts_per_step, cfg.grpo.num_generations_per_prompt
    summary = RunSummary(start_step=s.start_step)
    nothing_left(s.logger, "grpo", s.start_step, cfg.grpo.max_steps)
    if cfg.grpo.val_at_start and s.start_step == 0:
        log_validation(s.logger, summary, 0, {"accuracy": validate(s, iteration=0)})
    timer.take()  # start-up time is not part of step 0

    for step in range(s.start_step, cfg.grpo.max_steps):
        it = {"rl.iteration": step}
        # input.value / output.value: what a trace list (Phoenix) shows, so steps differ there.
        with timer.span(
            "rl.grpo.step", **it, **{"rl.algorithm": "grpo", "input.value": f"grpo step {step}"}
        ) as step_span:
            # DATA: P prompts, each repeated G times; the group of a prompt sits in adjacent rows.
            with timer.span(
                "rl.grpo.data_processing",
                **it,
                **{
                    "rl.num_prompts_per_step": P,
                    "rl.num_generations_per_prompt": G,
                    "rl.batch_size": P * G,
                },
            ):
                problems = [p for p in s.train_data.next_batch(P) for _ in range(G)]
                input_ids, attention_mask = encode_prompts(s.task, problems)

            # ROLLOUT: sample responses, then score them.
            with timer.span(
                "rl.grpo.rollout",
                **it,
                **{"rl.num_generations_per_prompt": G, "rl.batch_size": P * G},
            ):
                with timer.span("rl.grpo.generation", **it, **{"rl.batch_size": P * G}) as span:
                    # The sampling seed depends only on the step, so a resumed run samples alike.
                    out: GenerationOutput = ray.get(
                        call(
                            s.generation.generate,
                            input_ids,
                            attention_mask,
                            seed=step_seed(cfg.grpo.seed, step),
                        )
                    )
                    num_tokens = int(out["attention_mask"].sum())
                    annotate(span, **{"rl.num_tokens": num_tokens})
                with timer.span("rl.grpo.reward", **it) as span:
                    rewards, exact = score_responses(s.task, out, problems, input_ids.shape[1])
                    annotate(span, **{"rl.reward.mean": float(rewards.mean())})

            batch = response_batch(out)
            batch_ref = ray.put(batch)  # sent once, read by both log-prob passes

            # LOGPROBS of the sampled tokens under the policy that will be updated ...
            with timer.span("rl.grpo.logprob", **it, **{"rl.batch_size": P * G}):
                batch["prev_logprobs"] = ray.get(call(s.policy.get_logprobs, batch_ref))
            # ... and under the frozen reference, for the KL penalty.
            with timer.span("rl.grpo.reference_policy", **it, **{"rl.batch_size": P * G}):
                batch["ref_logprobs"] = ray.get(call(s.policy.get_reference_logprobs, batch_ref))

            # ADVANTAGE: each response's reward against its own group.
            with timer.span("rl.grpo.advantage", **it):
                batch["advantages"] = group_normalized_advantages(
                    rewards, G, normalize_std=cfg.grpo.normalize_rewards
                )

            # POLICY UPDATE: clipped policy gradient with a KL penalty, in micro-batches.
            n_micro = num_micro_batches(cfg.policy, P * G)
            with timer.span(
                "rl.grpo.policy_update",
                **it,
                **{"rl.batch_size": P * G, "rl.num_micro_batches": n_micro},
            ):
                train_metrics = ray.get(call(s.policy.train, batch))
            annotate(
                step_span,
                **{
                    "output.value": f"reward {float(rewards.mean()):.3f}, "
                    f"loss {float(train_metrics['loss']):.4f}"
                },
            )

            # WEIGHT SYNC: the generation worker samples from the updated policy next step.
            with timer.span("rl.grpo.weight_sync", **it) as span:
                num_bytes = sync_weights(s.generation, s.policy)
                annotate(span, **{"rl.weight_sync.num_bytes": num_bytes})

            done = step + 1
            if cfg.grpo.val_period and done % cfg.grpo.val_period == 0:
                log_validation(s.logger, summary, done, {"accuracy": validate(s, iteration=step)})
            if s.checkpoints is not None and (
                done % cfg.checkpointing.save_period == 0 or done == cfg.grpo.max_steps
            ):
                save_checkpoint(s, iteration=step)

        # LOG: after the step span closed, so the step's own time is known.
        timing = timer.take()
        step_time = timing["rl.grpo.step"]
        metrics = step_metrics(rewards, exact, out["response_mask"], train_metrics, num_tokens)
        log_step(s.logger, done, metrics, timing, step_time)
        summary.add({"reward": metrics["reward_mean"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: GRPOSetup, iteration: int) -> float:
    """Returns greedy exact-match accuracy on the held-out problems (one ``rl.grpo.evaluate`` span)."""
    problems = s.task.val
    with s.timer.span(
        "rl.grpo.evaluate", **{"rl.iteration": iteration, "rl.eval.num_samples": len(problems)}
    ) as span:
        accuracy = exact_match(s.generation, s.task, problems)
        annotate(span, **{"rl.eval.accuracy": accuracy})
    return accuracy


def save_checkpoint(s: GRPOSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (model, optimiser, data position, step, RNG);
    returns its folder."""
    assert s.checkpoints is not None
    done = iteration + 1
    final = os.path.join(s.checkpoints.root, f"step_{done}")
    with s.timer.span(
        "rl.grpo.checkpoint",
        **{"rl.iteration": iteration, "rl.checkpoint.path": final, "rl.checkpoint.step": done},
    ):
        return write_checkpoint(
            s.checkpoints, done, {"policy": s.policy}, s.train_data.state_dict()
        )


def load_checkpoint(s: GRPOSetup, path: str) -> None:
    """Restores the checkpoint at ``path`` into the workers, the data iterator and the RNG, and
    sends the restored weights to the generation worker; sets ``s.start_step``."""
    step = CheckpointManager.load_trainer_state(path)["step"]
    with s.timer.span(
        "rl.grpo.load_checkpoint", **{"rl.checkpoint.path": path, "rl.checkpoint.step": step}
    ):
        s.start_step = restore_checkpoint(path, {"policy": s.policy}, s.generation, s.train_data)


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
