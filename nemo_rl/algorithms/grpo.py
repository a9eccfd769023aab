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
from pydantic import BaseModel, ConfigDict, Field

from nemo_rl.algorithms.advantages import group_normalized_advantages
from nemo_rl.data import CharTokenizer, PromptIterator, left_pad
from nemo_rl.distributed import call, init_ray, spawn_actor
from nemo_rl.environments import ArithmeticEnvironment, Problem, make_problems
from nemo_rl.models.generation.interface import GenerationConfig, GenerationOutput
from nemo_rl.models.generation.torch_backend import TorchGeneration
from nemo_rl.models.policy import PolicyConfig, PolicyWorker
from nemo_rl.telemetry import TelemetryConfig
from nemo_rl.utils.checkpoint import (
    CheckpointConfig,
    CheckpointManager,
    get_rng_state,
    set_rng_state,
)
from nemo_rl.utils.logger import Logger, LoggerConfig
from nemo_rl.utils.timer import Timer, annotate

__all__ = [
    "ClusterConfig",
    "EnvConfig",
    "GRPOConfig",
    "GRPOSetup",
    "MasterConfig",
    "grpo_train",
    "setup",
    "teardown",
    "validate",
]


# -- config -------------------------------------------------------------------------------------


class GRPOConfig(BaseModel):
    """The outer loop."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(150, ge=1)
    """Training steps of the run (a resumed run continues up to the same number)."""
    num_prompts_per_step: int = Field(32, ge=1)
    """Distinct prompts per step."""
    num_generations_per_prompt: int = Field(8, ge=2)
    """Responses sampled per prompt: the group whose rewards are normalised together."""
    normalize_rewards: bool = True
    """Divide each group's centred rewards by the group's std (the GRPO paper's advantage)."""
    val_period: int = Field(25, ge=0)
    """Validate after every this many steps (0: never, except at the start if asked)."""
    val_at_start: bool = True
    """Validate once before the first step (step 0), as the baseline."""
    seed: int = 42
    """Seeds the model weights, the data order and every step's sampling."""


class EnvConfig(BaseModel):
    """The arithmetic task (see ``nemo_rl.environments.arithmetic``)."""

    model_config = ConfigDict(extra="forbid")

    max_first: int = Field(99, ge=1)
    """Largest first operand."""
    max_second: int = Field(9, ge=1)
    """Largest second operand."""
    carry: bool = False
    """Keep problems whose addition carries (much harder for a tiny policy)."""
    val_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of the problems held out for validation."""


class ClusterConfig(BaseModel):
    """Ray."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """Ray cluster to join; None starts a local one (``$RAY_ADDRESS`` also joins)."""
    num_cpus: int = Field(4, ge=1)
    """Logical CPUs of a local cluster."""
    worker_num_cpus: float = Field(1.0, gt=0.0)
    """CPUs each worker actor asks for (also its torch thread count)."""


class MasterConfig(BaseModel):
    """A whole GRPO run: ``examples/configs/grpo_tiny.yaml`` is one."""

    model_config = ConfigDict(extra="forbid")

    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    """The outer loop."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The trained model and its optimiser."""
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """How responses are sampled."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The task."""
    checkpointing: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoints and resume."""
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    """Metrics file and console."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Ray."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """Traces and metrics (see ``nemo_rl.telemetry``)."""


# -- setup --------------------------------------------------------------------------------------


@dataclass
class GRPOSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    tokenizer: CharTokenizer
    env: ArithmeticEnvironment
    train_data: PromptIterator[Problem]
    val_problems: list[Problem]
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
    tokenizer = CharTokenizer()
    train, val = make_problems(
        cfg.grpo.seed, cfg.env.max_first, cfg.env.max_second, cfg.env.carry, cfg.env.val_fraction
    )
    timer = Timer()
    with timer.span("rl.grpo.model_init", **{"rl.model": cfg.policy.model_name}):
        policy, generation = _start_workers(cfg, tokenizer)
    checkpoints = None
    if cfg.checkpointing.enabled:
        root = cfg.checkpointing.checkpoint_dir or os.path.join(cfg.logger.log_dir, "checkpoints")
        checkpoints = CheckpointManager(root, keep=cfg.checkpointing.keep)
    s = GRPOSetup(
        cfg=cfg,
        tokenizer=tokenizer,
        env=ArithmeticEnvironment(),
        train_data=PromptIterator(train, seed=cfg.grpo.seed),
        val_problems=val,
        policy=policy,
        generation=generation,
        logger=None,  # type: ignore[arg-type]  # made below, once the start step is known
        checkpoints=checkpoints,
        timer=timer,
    )
    if checkpoints is not None and (latest := checkpoints.latest()) is not None:
        load_checkpoint(s, latest)
    s.logger = Logger(cfg.logger, total_steps=cfg.grpo.max_steps, initial_step=s.start_step)
    return s


def _start_workers(cfg: MasterConfig, tokenizer: CharTokenizer) -> tuple[Any, Any]:
    cpus = cfg.cluster.worker_num_cpus
    policy = spawn_actor(
        PolicyWorker,
        cfg.policy,
        tokenizer.vocab_size,
        cfg.grpo.seed,
        temperature=cfg.generation.temperature,
        num_cpus=cpus,
    )
    if cfg.generation.backend == "vllm":
        from nemo_rl.models.generation.vllm_backend import VllmGeneration, vllm_num_gpus

        model_dir = os.path.abspath(os.path.join(cfg.logger.log_dir, "hf_policy"))
        ray.get(call(policy.save_pretrained, model_dir))
        generation = spawn_actor(
            VllmGeneration,
            model_dir,
            cfg.policy.model_name,
            cfg.generation,
            tokenizer,
            cfg.grpo.seed,
            num_cpus=cpus,
            num_gpus=vllm_num_gpus(),
        )
    else:
        # Built from the same seed as the policy, so both start with identical weights.
        generation = spawn_actor(
            TorchGeneration,
            cfg.policy.model,
            cfg.policy.model_name,
            cfg.generation,
            tokenizer.vocab_size,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            cfg.grpo.seed,
            num_cpus=cpus,
        )
    ray.get([policy.__ray_ready__.remote(), generation.__ray_ready__.remote()])
    return policy, generation


def teardown(s: GRPOSetup) -> None:
    """Flushes the workers' telemetry, stops them and closes the logger."""
    actors = [s.policy, s.generation]
    ray.get([a.close.remote() for a in actors])
    for a in actors:
        ray.kill(a)
    s.logger.close()


# -- the loop -----------------------------------------------------------------------------------


def grpo_train(s: GRPOSetup) -> dict[str, Any]:
    """Runs steps ``s.start_step .. grpo.max_steps - 1``; returns a summary of the run.

    The summary holds ``validation`` (``[(step, accuracy), ...]``) and ``rewards`` (the mean
    reward of each step run). Every metric also goes to ``<log_dir>/metrics.jsonl``.
    """
    cfg, timer, tok = s.cfg, s.timer, s.tokenizer
    P, G = cfg.grpo.num_prompts_per_step, cfg.grpo.num_generations_per_prompt
    summary: dict[str, Any] = {"validation": [], "rewards": []}
    if s.start_step >= cfg.grpo.max_steps:
        s.logger.print(
            f"resumed after step {s.start_step}: grpo.max_steps={cfg.grpo.max_steps} is reached, "
            "nothing to train (raise grpo.max_steps, or start in a new logger.log_dir)"
        )

    if cfg.grpo.val_at_start and s.start_step == 0:
        accuracy = validate(s, iteration=0)
        s.logger.log({"accuracy": accuracy}, step=0, prefix="validation")
        s.logger.print(f"step 0: validation accuracy {accuracy:.3f}")
        summary["validation"].append((0, accuracy))
    timer.take()  # start-up time is not part of step 0

    for step in range(s.start_step, cfg.grpo.max_steps):
        it = {"rl.iteration": step}
        with timer.span("rl.grpo.step", **it, **{"rl.algorithm": "grpo"}):
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
                input_ids, attention_mask = left_pad(
                    [tok.encode(p.prompt, add_bos=True) for p in problems], tok.pad_token_id
                )

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
                            seed=_step_seed(cfg, step),
                        )
                    )
                    num_tokens = int(out["attention_mask"].sum())
                    annotate(span, **{"rl.num_tokens": num_tokens})
                with timer.span("rl.grpo.reward", **it) as span:
                    responses = _decode_responses(tok, out, input_ids.shape[1])
                    stopped = out["stopped"].tolist()
                    rewards = torch.tensor(
                        s.env.step(responses, [p.answer for p in problems], stopped)
                    )
                    exact = sum(
                        s.env.is_correct(r, p.answer, st)
                        for r, p, st in zip(responses, problems, stopped, strict=True)
                    ) / len(problems)
                    annotate(span, **{"rl.reward.mean": float(rewards.mean())})

            batch = {
                "input_ids": out["output_ids"],
                "attention_mask": out["attention_mask"],
                "response_mask": out["response_mask"],
            }
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
            n_micro = _num_micro_batches(cfg.policy, P * G)
            with timer.span(
                "rl.grpo.policy_update",
                **it,
                **{"rl.batch_size": P * G, "rl.num_micro_batches": n_micro},
            ):
                train_metrics = ray.get(call(s.policy.train, batch))

            # WEIGHT SYNC: the generation worker samples from the updated policy next step.
            with timer.span("rl.grpo.weight_sync", **it) as span:
                num_bytes = ray.get(call(s.generation.update_weights, call(s.policy.state_dict)))
                annotate(span, **{"rl.weight_sync.num_bytes": num_bytes})

            done = step + 1
            if cfg.grpo.val_period and done % cfg.grpo.val_period == 0:
                accuracy = validate(s, iteration=step)
                summary["validation"].append((done, accuracy))
            if s.checkpoints is not None and (
                done % cfg.checkpointing.save_period == 0 or done == cfg.grpo.max_steps
            ):
                save_checkpoint(s, iteration=step)

        # LOG: after the step span closed, so the step's own time is known.
        timing = timer.take()
        step_time = timing["rl.grpo.step"]
        metrics = {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "accuracy": exact,
            "response_length": float(out["response_mask"].sum(-1).float().mean()),
            **{
                k: train_metrics[k]
                for k in ("loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "lr")
            },
            "num_tokens": num_tokens,
            "tokens_per_sec": num_tokens / step_time,
        }
        s.logger.log(metrics, step=done, prefix="train")
        s.logger.log(timing, step=done, prefix="timing")
        if summary["validation"] and summary["validation"][-1][0] == done:
            s.logger.log({"accuracy": summary["validation"][-1][1]}, step=done, prefix="validation")
            s.logger.print(f"step {done}: validation accuracy {summary['validation'][-1][1]:.3f}")
        s.logger.progress(done, metrics["reward_mean"], metrics["loss"], step_time)
        summary["rewards"].append(metrics["reward_mean"])
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: GRPOSetup, iteration: int) -> float:
    """Returns greedy exact-match accuracy on the held-out problems (one ``rl.grpo.evaluate`` span)."""
    tok, problems = s.tokenizer, s.val_problems
    with s.timer.span(
        "rl.grpo.evaluate", **{"rl.iteration": iteration, "rl.eval.num_samples": len(problems)}
    ) as span:
        input_ids, attention_mask = left_pad(
            [tok.encode(p.prompt, add_bos=True) for p in problems], tok.pad_token_id
        )
        out = ray.get(call(s.generation.generate, input_ids, attention_mask, greedy=True))
        responses = _decode_responses(tok, out, input_ids.shape[1])
        stopped = out["stopped"].tolist()
        correct = sum(
            s.env.is_correct(r, p.answer, st)
            for r, p, st in zip(responses, problems, stopped, strict=True)
        )
        accuracy = correct / len(problems)
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
        tmp = s.checkpoints.begin(done)
        ray.get(call(s.policy.save_checkpoint, tmp))
        trainer_state = {"step": done, "data": s.train_data.state_dict(), "rng": get_rng_state()}
        return s.checkpoints.finish(tmp, done, trainer_state)


def load_checkpoint(s: GRPOSetup, path: str) -> None:
    """Restores the checkpoint at ``path`` into the workers, the data iterator and the RNG, and
    sends the restored weights to the generation worker; sets ``s.start_step``."""
    state = CheckpointManager.load_trainer_state(path)
    with s.timer.span(
        "rl.grpo.load_checkpoint",
        **{"rl.checkpoint.path": path, "rl.checkpoint.step": state["step"]},
    ):
        ray.get(call(s.policy.load_checkpoint, path))
        ray.get(call(s.generation.update_weights, call(s.policy.state_dict)))
        s.train_data.load_state_dict(state["data"])
        set_rng_state(state["rng"])
        s.start_step = int(state["step"])


def _step_seed(cfg: MasterConfig, step: int) -> int:
    return cfg.grpo.seed * 1_000_003 + step


def _decode_responses(tok: CharTokenizer, out: GenerationOutput, prompt_len: int) -> list[str]:
    return [tok.decode(row) for row in out["output_ids"][:, prompt_len:].tolist()]


def _num_micro_batches(cfg: PolicyConfig, batch_size: int) -> int:
    per_pass = 0
    for start in range(0, batch_size, cfg.train_global_batch_size):
        mini = min(cfg.train_global_batch_size, batch_size - start)
        per_pass += -(-mini // cfg.train_micro_batch_size)
    return per_pass * cfg.train_passes
