"""PPO with a value model: sample responses, score them, estimate per-token advantages with GAE
from a learned value function, fit the value function, then take clipped policy-gradient steps.

Reads top to bottom like ``grpo.py``: the config, ``setup`` (task, data, three Ray workers: the
policy, its generation copy and the value model, then resume), and ``ppo_train`` whose every
phase is one literal ``with timer.span("rl.ppo.<phase>")`` block. The value model is the tiny
Llama trunk with a scalar head (``PolicyConfig.head: scalar``) in its own ``PolicyWorker`` actor
(worker group ``value``); its ``rl.worker.*`` spans join the step's trace because every request
goes through ``call(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, field_validator, model_validator

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms.advantages import (
    explained_variance,
    gae_advantages,
    masked_whiten,
    state_values,
)
from nemo_rl.algorithms.common import RunResult, RunSummary, Task
from nemo_rl.algorithms.loss_functions import (
    ClippedPGLoss,
    ClippedPGLossConfig,
    ClippedValueLoss,
    ClippedValueLossConfig,
)
from nemo_rl.data import PromptIterator, load_tokenizer
from nemo_rl.environments import Problem
from nemo_rl.models.generation.group import GenerationGroup
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.policy import PolicyConfig, PolicyGroup, SharedBatch
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer
from spanspec.export import TelemetryCost

__all__ = ["MasterConfig", "PPOConfig", "PPOSetup", "ppo_train", "run", "setup", "teardown"]


# -- config -------------------------------------------------------------------------------------


class PPOConfig(common.OnPolicyLoopConfig):
    """The outer loop and PPO's coefficients; one response per prompt is enough, the value model
    is the baseline."""

    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount of GAE (per token)."""
    lam: float = Field(0.95, ge=0.0, le=1.0)
    """GAE's lambda: 0 is the one-step TD advantage, 1 the Monte-Carlo return minus the value."""
    normalize_advantages: bool = True
    """Whiten the step's advantages over its response tokens (mean 0, std 1)."""
    critic_warmup_steps: int = Field(0, ge=0)
    """First steps that train only the value model (the policy is left as it is)."""
    loss: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    """Coefficients of the clipped policy loss."""
    value_loss: ClippedValueLossConfig = Field(default_factory=ClippedValueLossConfig)
    """Coefficients of the clipped value loss."""


class MasterConfig(common.RunSections):
    """A whole PPO run: ``examples/configs/ppo_tiny.yaml`` is one."""

    model_config = ConfigDict(extra="forbid")
    SECTION: ClassVar[str] = "ppo"

    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """How responses are sampled."""
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    """The outer loop."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The trained policy and its optimiser."""
    value: PolicyConfig = Field(default_factory=lambda: PolicyConfig(head="scalar"))
    """The value model (critic) and its optimiser; ``head`` must be ``scalar``. Without its own
    ``model_name`` it starts from the policy's model (a scalar head on its trunk)."""

    def ranks(self) -> list[common.Ranks]:
        """The policy, value-model and generation ranks."""
        p = self.ppo
        return common.rollout_ranks(
            "ppo",
            p.num_prompts_per_step,
            p.num_generations_per_prompt,
            {"policy": self.policy, "value": self.value},
            self.generation,
        )

    @field_validator("value")
    @classmethod
    def _value_head_is_scalar(cls, value: PolicyConfig) -> PolicyConfig:
        if value.head != "scalar":
            raise ValueError("the value model needs head: scalar (one value per token)")
        return value

    @model_validator(mode="after")
    def _value_reads_the_policys_tokens(self) -> MasterConfig:
        if "model_name" not in self.value.model_fields_set:
            self.value = self.value.model_copy(
                update={"model_name": self.policy.model_name, "tokenizer": self.policy.tokenizer}
            )
        # The critic scores every token the policy samples: its embeddings must have a row each.
        vocab = load_tokenizer(self.policy.tokenizer_folder()).vocab_size
        sampled, rows = self.policy.output_size(vocab), self.value.output_size(vocab)
        if rows < sampled:
            raise ValueError(
                f"value.model_name: the value model's embeddings have {rows} rows, fewer than "
                f"the {sampled} tokens the policy samples from; use the policy's model family"
            )
        return self


# -- setup --------------------------------------------------------------------------------------


@dataclass
class PPOSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    task: Task
    train_data: PromptIterator[Problem]
    policy: PolicyGroup
    """The policy's ranks (with its frozen reference)."""
    value: PolicyGroup
    """The value model's ranks (``head: scalar``)."""
    generation: GenerationGroup
    """The generation ranks."""
    checkpoints: CheckpointManager | None
    logger: Logger
    """Opened at ``start_step``."""
    start_step: int = 0
    """Steps already done: those of the checkpoint the run resumed from, else 0."""
    timer: Timer = field(default_factory=Timer)

    def workers(self) -> dict[str, Any]:
        """The checkpointed workers, by their folder name in a checkpoint."""
        return {"policy": self.policy, "value": self.value}


def setup(cfg: MasterConfig) -> PPOSetup:
    """Builds the task, the data, the policy, generation and value workers, resumes from the
    latest checkpoint when there is one, and opens the logger at the step it resumed from;
    returns the ``PPOSetup``."""
    common.start_ray(cfg)
    task = common.make_task(cfg, cfg.ppo.seed)
    vocab, seed, temperature = task.tokenizer.vocab_size, cfg.ppo.seed, cfg.generation.temperature
    timer = Timer()
    with timer.span("rl.ppo.model_init", **{"rl.model": cfg.policy.label}):
        policy = common.spawn_policy(
            cfg.policy, cfg.cluster, vocab, seed, ClippedPGLoss(cfg.ppo.loss, temperature)
        )
        # Same seed: with the policy's shape, the critic's trunk starts as the policy's. A tiny
        # critic is sized to every token the policy can sample.
        value = common.spawn_policy(
            cfg.value,
            cfg.cluster,
            cfg.policy.output_size(vocab),
            seed,
            ClippedValueLoss(cfg.ppo.value_loss),
            group="value",
            reference=False,
        )
        generation = common.spawn_policy_generation(cfg, task, seed, policy)
    train_data = PromptIterator(task.train, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.ppo.load_checkpoint", **common.resume_attributes(latest)):
            workers = {"policy": policy, "value": value}
            start_step = common.restore_checkpoint(latest, workers, generation, train_data)
    logger = common.open_logger(cfg.logger, "ppo", cfg.ppo.max_steps, start_step, latest)
    return PPOSetup(
        cfg, task, train_data, policy, value, generation, checkpoints, logger, start_step, timer
    )


def teardown(s: PPOSetup) -> list[TelemetryCost]:
    """Flushes the workers' telemetry, stops them and closes the logger; returns what each
    worker's telemetry cost."""
    return common.close_run(s.logger, s.policy, s.value, s.generation)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.ppo.job`` span: setup, train, teardown."""
    with spanspec.span("rl.ppo.job", **job_attributes):
        return common.train_in_job(cfg, setup, ppo_train, teardown)


# -- the loop -----------------------------------------------------------------------------------


def ppo_train(s: PPOSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. ppo.max_steps`` (numbered from 1); returns a summary of the run.

    The summary's ``curves`` hold each step's mean ``reward`` and ``value_loss``, its
    ``validation`` the held-out ``accuracy``. Every metric also goes to ``<log_dir>/metrics.jsonl``.
    """
    cfg, timer = s.cfg, s.timer
    ppo = cfg.ppo
    sizes = common.batch_attributes(ppo.num_prompts_per_step, ppo.num_generations_per_prompt)
    B = sizes["rl.batch_size"]
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "ppo", s.start_step, ppo.max_steps):
        return summary
    if ppo.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, {"accuracy": validate(s, iteration=0)})
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, ppo.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        train_policy = step > ppo.critic_warmup_steps  # steps 1..warm-up train the critic only
        with timer.span("rl.ppo.step", **it, **{"rl.algorithm": "ppo"}):
            with timer.span("rl.ppo.data_processing", **it, **sizes):
                problems, prompt_ids, prompt_mask = common.draw_prompts(
                    s.task, s.train_data, ppo.num_prompts_per_step, ppo.num_generations_per_prompt
                )

            # ROLLOUT: one sampled response per row, scored by the environment.
            with timer.span("rl.ppo.rollout", **it, **{"rl.batch_size": B}):
                with timer.span("rl.ppo.generation", **it, **{"rl.batch_size": B}) as span:
                    seed = common.step_seed(ppo.seed, step)
                    out = s.generation.generate(prompt_ids, prompt_mask, seed=seed)
                    spanspec.annotate(span, **{"rl.num_tokens": common.num_tokens(out)})
                with timer.span("rl.ppo.reward", **it) as span:
                    rewards, exact = common.score_responses(
                        s.task, out, problems, prompt_ids.shape[1]
                    )
                    spanspec.annotate(span, **{"rl.reward.mean": float(rewards.mean())})
            batch = common.response_batch(out)
            mask = batch["response_mask"]
            shared = SharedBatch(batch)  # sent once, read by the value and both log-prob passes

            # VALUE INFERENCE: the critic's estimate of the return from each response token.
            with timer.span("rl.ppo.value_inference", **it, **{"rl.batch_size": B}):
                batch["values"] = state_values(s.value.get_values(shared))
            with timer.span("rl.ppo.logprob", **it, **{"rl.batch_size": B}):
                batch["prev_logprobs"] = s.policy.get_logprobs(shared)
            with timer.span("rl.ppo.reference_policy", **it, **{"rl.batch_size": B}):
                batch["ref_logprobs"] = s.policy.get_reference_logprobs(shared)

            # ADVANTAGE: GAE over each response's tokens; the returns are the critic's targets.
            with timer.span("rl.ppo.advantage", **it):
                advantages, batch["returns"] = gae_advantages(
                    rewards, batch["values"], mask, ppo.gamma, ppo.lam
                )
                batch["advantages"] = (
                    masked_whiten(advantages, mask) if ppo.normalize_advantages else advantages
                )
                variance = explained_variance(batch["values"], batch["returns"], mask)

            with timer.span("rl.ppo.value_update", **it):
                value_metrics = s.value.train(batch)

            policy_metrics = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
            if train_policy:  # after the critic's warm-up
                with timer.span("rl.ppo.policy_update", **it, **{"rl.batch_size": B}) as span:
                    policy_metrics = s.policy.train(batch)
                    spanspec.annotate(
                        span, **{"rl.num_micro_batches": policy_metrics["num_micro_batches"]}
                    )
                with timer.span("rl.ppo.weight_sync", **it) as span:
                    num_bytes = common.sync_weights(s.generation, s.policy)
                    spanspec.annotate(span, **{"rl.weight_sync.num_bytes": num_bytes})

            if common.is_due(step, ppo.val_period):
                accuracy = validate(s, iteration=step)
                common.log_validation(s.logger, summary, step, {"accuracy": accuracy})
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, ppo.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        metrics = {
            "reward_mean": float(rewards.mean()),
            "accuracy": exact,
            "response_length": float(mask.sum(-1).float().mean()),
            **{k: policy_metrics[k] for k in ("loss", "pg_loss", "kl", "clip_fraction")},
            "value_loss": value_metrics["loss"],
            "value_clip_fraction": value_metrics["value_clip_fraction"],
            "value_grad_norm": value_metrics["grad_norm"],
            "explained_variance": variance,
            "value_mean": float((batch["values"] * mask).sum() / mask.sum().clamp(min=1)),
            "advantage_mean": float((advantages * mask).sum() / mask.sum().clamp(min=1)),
            "num_tokens": common.num_tokens(out),
        }
        for key in ("grad_norm", "lr"):
            if key in policy_metrics:
                metrics[key] = policy_metrics[key]
        common.log_step(s.logger, step, metrics, timing, timing["rl.ppo.step"], policy_metrics)
        summary.add({"reward": metrics["reward_mean"], "value_loss": metrics["value_loss"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: PPOSetup, iteration: int) -> float:
    """Returns greedy exact-match accuracy on the held-out problems (one ``rl.ppo.evaluate`` span)."""
    with s.timer.span(
        "rl.ppo.evaluate", **{"rl.iteration": iteration, "rl.eval.num_samples": len(s.task.val)}
    ) as span:
        accuracy = common.exact_match(s.generation, s.task, s.task.val)
        spanspec.annotate(span, **{"rl.eval.accuracy": accuracy})
    return accuracy


def save_checkpoint(s: PPOSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration``: policy and value model (weights and
    optimiser), data position, step and RNG; returns its folder."""
    assert s.checkpoints is not None
    with s.timer.span(
        "rl.ppo.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)
    ):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, s.workers(), data)
