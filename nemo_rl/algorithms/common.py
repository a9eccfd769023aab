"""What every loop shares: the Ray, task and data config blocks, the task (from ``task.py``),
starting and stopping workers, checkpoint files, exact-match evaluation, and the run summary.

The phases themselves stay in each loop as literal ``with timer.span("rl.<algo>.<phase>")``
blocks (so the code scan sees which loop emits which span); what runs inside them is here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import ray
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from nemo_rl.algorithms.task import PROBLEM_ROLES, EnvConfig, Task, make_task
from nemo_rl.data import DataConfig, PromptIterator, Tokenizer, left_pad
from nemo_rl.distributed import init_ray, unreachable
from nemo_rl.distributed.trace_context import remember_pid
from nemo_rl.distributed.worker_group import Placement, close_timeout_s
from nemo_rl.environments import Problem
from nemo_rl.models.causal_lm import ModelConfig
from nemo_rl.models.generation.group import GenerationGroup
from nemo_rl.models.generation.interface import GenerationConfig, GenerationOutput
from nemo_rl.models.generation.torch_backend import TorchGeneration
from nemo_rl.models.policy import LossFunction, PolicyConfig, PolicyGroup
from nemo_rl.telemetry import TelemetryConfig, record_metrics
from nemo_rl.utils.checkpoint import (
    CheckpointConfig,
    CheckpointManager,
    get_rng_state,
    set_rng_state,
)
from nemo_rl.utils.config import ConfigError
from nemo_rl.utils.logger import Logger, LoggerConfig
from spanspec.export import TelemetryCost

__all__ = [
    "ClusterConfig",
    "EnvConfig",
    "LoopConfig",
    "OnPolicyLoopConfig",
    "Ranks",
    "RunConfig",
    "RunResult",
    "RunSections",
    "RunSummary",
    "Task",
    "batch_attributes",
    "checkpoint_attributes",
    "checkpoint_manager",
    "close_run",
    "cluster_address_problem",
    "decode_responses",
    "draw_prompts",
    "encode_prompts",
    "exact_match",
    "is_due",
    "log_step",
    "log_validation",
    "make_task",
    "nothing_left",
    "num_tokens",
    "open_logger",
    "rank_problems",
    "read_checkpoint",
    "response_batch",
    "restore_checkpoint",
    "resume_attributes",
    "rollout_ranks",
    "score_responses",
    "spawn_generation",
    "spawn_policy",
    "spawn_policy_generation",
    "start_ray",
    "step_seed",
    "stop_workers",
    "sync_weights",
    "train_in_job",
    "wait_ready",
    "worker_num_gpus",
    "write_checkpoint",
]


# -- config blocks every loop has -----------------------------------------------------------------


class LoopConfig(BaseModel):
    """What every loop's own section (``grpo:``, ``sft:``, ...) holds, so ``<algo>.max_steps=N``
    and the other keys below work alike in each."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(150, ge=1)
    """Training steps of the run (a resumed run continues up to the same number)."""
    val_period: int = Field(25, ge=0)
    """Validate after every this many steps (0: never, except at the start if asked)."""
    val_at_start: bool = True
    """Validate once before the first step (step 0), as the baseline."""
    seed: int = 42
    """Seeds the model weights, the data split and order, and every step's sampling."""


class ClusterConfig(BaseModel):
    """Ray."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """Ray cluster to join; None starts a local one (``$RAY_ADDRESS`` also joins)."""
    num_cpus: int = Field(4, ge=1)
    """Logical CPUs of a local cluster."""
    worker_num_cpus: float = Field(1.0, gt=0.0)
    """CPUs each rank asks for (also its torch thread count)."""
    worker_num_gpus: float | None = Field(None, ge=0.0)
    """GPUs each rank asks for; None: 1 where the cluster has GPUs, else 0 (a fraction lets
    several ranks share one GPU)."""
    placement: Placement = "pack"
    """Where a role's ranks go: ``pack`` fills a node before the next, ``spread`` puts them on
    different nodes."""
    peak_flops_per_worker: float | None = Field(None, gt=0.0)
    """Peak FLOP/s of one rank's device, for MFU; None: the known peak of its GPU by name, and
    MFU unknown on a CPU."""


@dataclass(frozen=True)
class Ranks:
    """One role's ranks as a config asks for them, for the checks before Ray starts."""

    key: str
    """What sets the count (``policy.num_workers``), as messages name it."""
    count: int
    divides: tuple[tuple[str, int], ...] = ()
    """``(key, value)`` pairs the count must divide (a global batch shared out across ranks)."""


class OnPolicyLoopConfig(LoopConfig):
    """The outer-loop keys of a loop that samples from its policy each step (PPO, distillation
    extend it with their own coefficients)."""

    num_prompts_per_step: int = Field(64, ge=1)
    """Distinct prompts per step."""
    num_generations_per_prompt: int = Field(1, ge=1)
    """Responses sampled per prompt."""


class RunSections(BaseModel):
    """The sections every run config has besides its loop's own and its models' (``policy``,
    ``value``, ``teacher``) and, where the loop samples, ``generation``."""

    model_config = ConfigDict(extra="forbid")

    SECTION: ClassVar[str] = ""
    """The loop's own section key (``grpo``, ``sft``, ...); set by each loop's ``MasterConfig``."""
    DATA_ROLES: ClassVar[tuple[str, ...]] = PROBLEM_ROLES
    """The fields the loop reads from each ``data:`` example (``task.PROBLEM_ROLES``, ...)."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    """The verifier, and the built-in arithmetic task."""
    data: DataConfig = Field(default_factory=DataConfig)
    """Dataset files replacing the built-in task (JSONL)."""
    checkpointing: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoints and resume."""
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    """Metrics file and console."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Ray."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """Traces and metrics (see ``nemo_rl.telemetry``)."""

    @property
    def section(self) -> Any:
        """Returns the loop's own section (``self.grpo``, ``self.sft``, ...)."""
        return getattr(self, self.SECTION)

    @model_validator(mode="after")
    def _task_is_usable(self) -> RunSections:
        # Builds the task once as the config loads (files are read once per process), so a bad
        # dataset line stops the run here, before Ray starts, naming file:line.
        if self.SECTION:
            make_task(self, self.section.seed)
        return self

    def ranks(self) -> list[Ranks]:
        """The ranks of every worker role the run starts at once; each loop's config says."""
        return []

    @model_validator(mode="after")
    def _ranks_fit(self) -> RunSections:
        problems = rank_problems(self.ranks(), self.cluster)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class RunConfig(RunSections):
    """``RunSections`` plus the one trained model, ``policy`` (every loop but PPO and
    distillation, which name their models themselves)."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The trained model and its optimiser."""


def rollout_ranks(
    section: str,
    prompts: int,
    generations: int,
    trained: dict[str, PolicyConfig],
    generation: GenerationConfig,
) -> list[Ranks]:
    """The ranks of a loop that samples each step: every trained role (``policy``, ``value``)
    shares out the step's ``prompts x generations`` sequences and its global mini-batch, and the
    generation ranks share out the prompts (a prompt's samples stay on one rank)."""
    batch = f"{section}.num_prompts_per_step x {section}.num_generations_per_prompt"
    out = [
        Ranks(
            f"{name}.num_workers",
            cfg.num_workers,
            (
                (batch, prompts * generations),
                (f"{name}.train_global_batch_size", cfg.train_global_batch_size),
            ),
        )
        for name, cfg in trained.items()
    ]
    return [
        *out,
        Ranks(
            "generation.num_workers",
            generation.num_workers,
            ((f"{section}.num_prompts_per_step", prompts),),
        ),
    ]


def rank_problems(
    ranks: Sequence[Ranks], cluster: ClusterConfig, cpus: float | None = None
) -> list[str]:
    """Why ``ranks`` cannot run on ``cluster``: a count that does not divide what it shares out,
    or more CPUs than the cluster has (``cpus``: a joined cluster's; by default a local
    cluster's ``cluster.num_cpus``, and no CPU check when joining one not started yet)."""
    problems = [
        f"{r.key}={r.count} does not divide {key}={value}; pick a number of ranks that "
        f"divides it (or change {key})"
        for r in ranks
        for key, value in r.divides
        if r.count >= 1 and value % r.count
    ]
    if cpus is None:
        if cluster.address or os.environ.get("RAY_ADDRESS"):
            return problems  # a cluster to join: checked once joined
        cpus, where = float(cluster.num_cpus), f"cluster.num_cpus={cluster.num_cpus}"
    else:
        where = f"the Ray cluster at cluster.address, with {cpus:g} CPUs,"
    count = sum(r.count for r in ranks)
    asked = count * cluster.worker_num_cpus
    if asked > cpus:
        parts = " + ".join(f"{r.key}={r.count}" for r in ranks)
        problems.append(
            f"{where} cannot place the run's {count} ranks ({parts}) of "
            f"cluster.worker_num_cpus={cluster.worker_num_cpus:g} CPUs each: they ask for "
            f"{asked:g} CPUs; raise cluster.num_cpus or lower the ranks or cluster.worker_num_cpus"
        )
    return problems


def cluster_address_problem(cluster: ClusterConfig) -> str | None:
    """Why the cluster the run would join (``cluster.address``, else ``$RAY_ADDRESS``) cannot be
    joined, or None (also when the run starts its own). Checked before anything starts."""
    address = cluster.address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local" or ray.is_initialized():
        return None
    why = unreachable(address)
    if why is None:
        return None
    key = "cluster.address" if cluster.address else "RAY_ADDRESS"
    return (
        f"{key}={address}: {why}; start the cluster with `ray start --head` (its "
        "--node-ip-address must be reachable from here) or correct the address"
    )


def start_ray(cfg: RunSections) -> None:
    """Starts (or joins) Ray for the run; raises ``ConfigError`` when the cluster to join does
    not answer, or cannot hold the run's ranks (a local one was checked with the config), naming
    what is asked for and what is there, so nothing waits for resources Ray will never get."""
    if problem := cluster_address_problem(cfg.cluster):
        raise ConfigError([problem])
    resources = init_ray(num_cpus=cfg.cluster.num_cpus, address=cfg.cluster.address)
    problems = rank_problems(cfg.ranks(), cfg.cluster, cpus=float(resources.get("CPU", 0)))
    if problems:
        raise ConfigError(problems)


def worker_num_gpus(cluster: ClusterConfig) -> float:
    """The GPUs each rank asks for: ``cluster.worker_num_gpus``, else 1 where the Ray cluster
    has a GPU and 0 where it has none. Call after Ray started."""
    if cluster.worker_num_gpus is not None:
        return cluster.worker_num_gpus
    return 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0


# -- the task (built in task.py) -----------------------------------------------------------------


def decode_responses(tok: Tokenizer, out: GenerationOutput, prompt_len: int) -> list[str]:
    """Returns the text of each generated response (the tokens after the prompt)."""
    return [tok.decode(row) for row in out["output_ids"][:, prompt_len:].tolist()]


def encode_prompts(task: Task, problems: Sequence[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns the left-padded ``(input_ids, attention_mask)`` of the problems' prompts."""
    tok = task.tokenizer
    return left_pad([tok.encode(p.prompt, add_bos=True) for p in problems], tok.pad_token_id)


def score_responses(
    task: Task, out: GenerationOutput, problems: Sequence[Problem], prompt_len: int
) -> tuple[torch.Tensor, float]:
    """Returns the environment's reward of each response (``[B]``) and the exact-match share."""
    responses = decode_responses(task.tokenizer, out, prompt_len)
    stopped = out["stopped"].tolist()
    answers = [p.answer for p in problems]
    rewards = torch.tensor(task.env.step(responses, answers, stopped), dtype=torch.float32)
    exact = sum(
        task.env.is_correct(r, a, st) for r, a, st in zip(responses, answers, stopped, strict=True)
    )
    return rewards, exact / len(problems)


def draw_prompts(
    task: Task, data: PromptIterator[Problem], num_prompts: int, num_generations: int
) -> tuple[list[Problem], torch.Tensor, torch.Tensor]:
    """Returns the step's problems (each of ``num_prompts`` repeated ``num_generations`` times, a
    prompt's rows adjacent) and their left-padded ``(input_ids, attention_mask)``."""
    problems = [p for p in data.next_batch(num_prompts) for _ in range(num_generations)]
    return (problems, *encode_prompts(task, problems))


def batch_attributes(num_prompts: int, num_generations: int) -> dict[str, int]:
    """The span attributes that size a step's batch (``data_processing`` carries them)."""
    return {
        "rl.num_prompts_per_step": num_prompts,
        "rl.num_generations_per_prompt": num_generations,
        "rl.batch_size": num_prompts * num_generations,
    }


def num_tokens(out: GenerationOutput) -> int:
    """Returns the tokens a rollout holds, prompt and response (``rl.num_tokens``)."""
    return int(out["attention_mask"].sum())


def response_batch(out: GenerationOutput) -> dict[str, torch.Tensor]:
    """Returns the training batch of a rollout: ``input_ids`` (prompt + response),
    ``attention_mask`` and ``response_mask`` (the tokens the policy chose)."""
    return {
        "input_ids": out["output_ids"],
        "attention_mask": out["attention_mask"],
        "response_mask": out["response_mask"],
    }


def step_seed(seed: int, step: int) -> int:
    """Returns the sampling seed of ``step`` (numbered from 1): it depends only on the run's seed
    and the step, so a resumed run samples exactly what the uninterrupted one would have."""
    return seed * 1_000_003 + step - 1  # as when steps were counted from 0: the same samples


def exact_match(generation: GenerationGroup, task: Task, problems: Sequence[Problem]) -> float:
    """Returns the share of ``problems`` the ``generation`` ranks answer right, greedily."""
    input_ids, attention_mask = encode_prompts(task, problems)
    out = generation.generate(input_ids, attention_mask, greedy=True)
    return score_responses(task, out, problems, input_ids.shape[1])[1]


# -- workers --------------------------------------------------------------------------------------


def spawn_policy(
    cfg: PolicyConfig,
    cluster: ClusterConfig,
    vocab_size: int,
    seed: int,
    loss_fn: LossFunction | None,
    temperature: float = 1.0,
    group: str = "policy",
    reference: bool = True,
) -> PolicyGroup:
    """Returns the ``cfg.num_workers`` ranks of the role ``group`` training with ``loss_fn``
    (None: scoring only, as a teacher), placed on ``cluster`` (Ray must be up)."""
    return PolicyGroup(
        cfg,
        vocab_size,
        seed,
        loss_fn,
        temperature,
        name=group,
        reference=reference,
        num_cpus=cluster.worker_num_cpus,
        num_gpus=worker_num_gpus(cluster),
        placement=cluster.placement,
        peak_flops_per_worker=cluster.peak_flops_per_worker,
    )


def spawn_generation(
    generation: GenerationConfig,
    model: ModelConfig,
    model_name: str,
    cluster: ClusterConfig,
    tokenizer: Tokenizer,
    seed: int,
    policy: PolicyGroup,
    log_dir: str,
    num_workers: int | None = None,
) -> GenerationGroup:
    """Returns the generation ranks (``generation.num_workers``, unless ``num_workers`` says)
    that start with the weights of ``policy``.

    The torch backend builds its model from the same seed as the policy (identical weights);
    the vLLM backend (one engine per rank) loads the policy saved as a Hugging Face folder
    under ``log_dir``.
    """
    ranks = {
        "num_workers": num_workers or generation.num_workers,
        "num_cpus": cluster.worker_num_cpus,
        "placement": cluster.placement,
    }
    if generation.backend == "vllm":
        from nemo_rl.models.generation.vllm_backend import VllmGeneration, vllm_num_gpus

        model_dir = os.path.abspath(os.path.join(log_dir, "hf_policy"))
        policy.save_pretrained(model_dir)
        return GenerationGroup(
            VllmGeneration,
            model_dir,
            model_name,
            generation,
            tokenizer,
            seed,
            num_gpus=cluster.worker_num_gpus
            if cluster.worker_num_gpus is not None
            else vllm_num_gpus(),
            **ranks,
        )
    return GenerationGroup(
        TorchGeneration,
        model,
        model_name,
        generation,
        tokenizer.vocab_size,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        seed,
        num_gpus=worker_num_gpus(cluster),
        **ranks,
    )


def spawn_policy_generation(
    cfg: Any, task: Task, seed: int, policy: PolicyGroup
) -> GenerationGroup:
    """``spawn_generation`` for a run config with ``generation``, ``policy``, ``cluster`` and
    ``logger`` sections: the generation ranks that sample from ``policy``."""
    return spawn_generation(
        cfg.generation,
        cfg.policy.model,
        cfg.policy.model_name,
        cfg.cluster,
        task.tokenizer,
        seed,
        policy,
        cfg.logger.log_dir,
    )


def wait_ready(*actors: Any) -> None:
    """Returns once every single actor (not a group: a group waits for its ranks itself) has
    started (raises what a failed constructor raised); notes each actor's pid for the stall
    watchdog's warnings."""
    pids = ray.get([a.__ray_call__.remote(_pid) for a in actors])
    for actor, pid in zip(actors, pids, strict=True):
        remember_pid(actor, pid)


def _pid(_actor: Any) -> int:
    return os.getpid()


def stop_workers(*workers: Any) -> list[TelemetryCost]:
    """Flushes the telemetry of ``workers`` (groups, or single actors) and stops them; one that
    already died (or None) is skipped. Returns what each live process's telemetry cost, for the
    job's cost line."""
    costs: list[TelemetryCost] = []
    groups = [w for w in workers if isinstance(w, PolicyGroup | GenerationGroup)]
    actors = [
        w for w in workers if w is not None and not isinstance(w, PolicyGroup | GenerationGroup)
    ]
    # Every process is asked to flush first, so they all flush at once; then each is waited for.
    for g in groups:
        g.begin_close()
    refs = [a.close.remote() for a in actors]
    for g in groups:
        costs += g.close()
    done = (
        set(ray.wait(refs, num_returns=len(refs), timeout=close_timeout_s())[0]) if refs else set()
    )
    for a, ref in zip(actors, refs, strict=True):
        try:  # one that did not answer in time (stopped, stuck) is killed all the same
            cost = ray.get(ref, timeout=0) if ref in done else None
        except Exception:  # a dead worker has nothing left to flush; the run already failed
            cost = None
        if isinstance(cost, TelemetryCost):
            costs.append(cost)
        ray.kill(a)
    return costs


def sync_weights(generation: GenerationGroup, policy: PolicyGroup) -> int:
    """Sends the weights of ``policy`` to every generation rank, through the object store once;
    returns the bytes all ranks received."""
    return generation.update_weights(policy.state_dict_ref())


@dataclass
class RunResult:
    """What a loop's ``run`` returns to the entry point."""

    summary: RunSummary
    """The curves and validations the entry script prints."""
    worker_costs: list[TelemetryCost] = field(default_factory=list)
    """What each worker's telemetry cost, returned by the teardown (the job's cost line)."""


def train_in_job(
    cfg: Any,
    setup: Callable[[Any], Any],
    train: Callable[[Any], RunSummary],
    teardown: Callable[[Any], list[TelemetryCost]],
) -> RunResult:
    """Runs ``train(setup(cfg))`` and always ``teardown``; returns the summary and the workers'
    telemetry costs. Each loop's ``run`` calls it inside its own literal ``rl.<algo>.job`` span."""
    s = setup(cfg)
    try:
        summary = train(s)
    finally:
        costs = teardown(s)
    return RunResult(summary, costs)


def close_run(logger: Logger, *actors: Any) -> list[TelemetryCost]:
    """A loop's teardown: flushes the actors' telemetry, stops them and closes the run's
    logger; returns the workers' telemetry costs."""
    costs = stop_workers(*actors)
    logger.close()
    return costs


# -- checkpoints ----------------------------------------------------------------------------------


def checkpoint_manager(
    checkpointing: CheckpointConfig, logger: LoggerConfig
) -> CheckpointManager | None:
    """Returns the run's checkpoint manager, or None when checkpointing is off."""
    if not checkpointing.enabled:
        return None
    root = checkpointing.checkpoint_dir or os.path.join(logger.log_dir, "checkpoints")
    return CheckpointManager(root, keep=checkpointing.keep)


def write_checkpoint(
    checkpoints: CheckpointManager, done: int, workers: dict[str, Any], data: dict[str, Any]
) -> str:
    """Writes checkpoint ``step_<done>``: each worker's state in ``<name>/``, the data position
    and the driver's RNG; returns its folder."""
    tmp = checkpoints.begin(done)
    for name, w in workers.items():
        w.save_checkpoint(os.path.join(tmp, name))
    trainer_state = {"step": done, "data": data, "rng": get_rng_state()}
    return checkpoints.finish(tmp, done, trainer_state)


def read_checkpoint(path: str, workers: dict[str, Any]) -> dict[str, Any]:
    """Restores each worker from ``path/<name>/`` and the driver's RNG; returns the trainer state
    (``step``, ``data``)."""
    state = CheckpointManager.load_trainer_state(path)
    for name, w in workers.items():
        w.load_checkpoint(os.path.join(path, name))
    set_rng_state(state["rng"])
    return state


def is_due(done: int, period: int, last: int | None = None) -> bool:
    """Whether something every ``period`` steps (0: never) is due after ``done`` steps; with
    ``last``, also after the run's last step."""
    return bool(period and done % period == 0) or done == last


def checkpoint_attributes(checkpoints: CheckpointManager, iteration: int) -> dict[str, Any]:
    """The attributes of the checkpoint span after step ``iteration`` (its folder ``step_<iteration>``)."""
    return {
        "rl.iteration": iteration,
        "rl.checkpoint.path": os.path.join(checkpoints.root, f"step_{iteration}"),
        "rl.checkpoint.step": iteration,
    }


def resume_attributes(path: str) -> dict[str, Any]:
    """The attributes of the load-checkpoint span restoring ``path``."""
    step = CheckpointManager.load_trainer_state(path)["step"]
    return {"rl.checkpoint.path": path, "rl.checkpoint.step": step}


def restore_checkpoint(
    path: str, workers: dict[str, Any], generation: Any, data: PromptIterator[Any]
) -> int:
    """Restores checkpoint ``path`` into the workers, the data iterator and the driver's RNG, and
    (unless ``generation`` is None) sends ``workers["policy"]``'s weights to ``generation``;
    returns the step it was taken after."""
    state = read_checkpoint(path, workers)
    if generation is not None:
        sync_weights(generation, workers["policy"])
    data.load_state_dict(state["data"])
    return int(state["step"])


# -- the run summary ------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """What a loop returns; the entry script prints it.

    ``curves`` holds per-step values of the run's headline training metrics (``reward`` for
    GRPO, ``loss`` for SFT, ...); ``validation`` one ``(step, {metric: value})`` per evaluation.
    """

    curves: dict[str, list[float]] = field(default_factory=dict)
    validation: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    start_step: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, step_values: dict[str, float]) -> None:
        """Appends one step's value of each headline metric."""
        for key, value in step_values.items():
            self.curves.setdefault(key, []).append(float(value))

    def lines(self) -> list[str]:
        """Returns the summary as the lines the entry script prints."""
        out = []
        for key, values in self.curves.items():
            if values:
                k = max(1, min(10, len(values) // 4))
                first, last = sum(values[:k]) / k, sum(values[-k:]) / k
                out.append(f"mean {key}: first {k} steps {first:.3f} -> last {k} steps {last:.3f}")
        metrics = list(dict.fromkeys(m for _, vals in self.validation for m in vals))
        for m in metrics:
            points = [(st, vals[m]) for st, vals in self.validation if m in vals]
            out.append(f"validation {m}: " + ", ".join(f"step {st} {v:.3f}" for st, v in points))
        return out + self.notes


# -- logging a step -------------------------------------------------------------------------------


def open_logger(
    cfg: LoggerConfig,
    section: str,
    max_steps: int,
    start_step: int,
    resumed_from: str | None = None,
) -> Logger:
    """Returns the run's logger, its progress bar at ``start_step`` of ``max_steps``; every
    scalar it logs also goes to the registry's metrics (``nemo_rl.telemetry.record_metrics``).

    A run that resumed from checkpoint ``resumed_from`` says so first, in one line: resuming is
    what a preempted job wants, and a surprise to someone who meant to start again.
    """
    logger = Logger(cfg, max_steps, initial_step=start_step, desc=section, sinks=(record_metrics,))
    if resumed_from is not None and start_step < max_steps:
        logger.print(
            f"resuming from {resumed_from}: steps 1-{start_step} of {max_steps} are done, "
            f"training continues at step {start_step + 1} (to start afresh, give a new "
            f"logger.log_dir or checkpointing.enabled=false)"
        )
    return logger


def nothing_left(logger: Logger, section: str, start_step: int, max_steps: int) -> bool:
    """Says so and returns True when a resumed run already reached ``<section>.max_steps``."""
    if start_step < max_steps:
        return False
    logger.print(
        f"this run already finished: its checkpoint is after step {start_step} and "
        f"{section}.max_steps={max_steps}, so there is nothing to train (raise "
        f"{section}.max_steps to train on, or give a new logger.log_dir to start afresh)"
    )
    return True


def log_validation(
    logger: Logger, summary: RunSummary, step: int, metrics: dict[str, float]
) -> None:
    """Records one evaluation after ``step`` in the metrics file, on the console and in the summary."""
    logger.log(metrics, step=step, prefix="validation")
    logger.print(
        f"step {step}: validation " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
    )
    summary.validation.append((step, metrics))


RANK_METRICS = ("flops", "flops_per_sec", "mfu", "rank_wait_s")
"""What ``PolicyGroup.train`` adds about the ranks and the hardware, logged as given."""


def log_step(
    logger: Logger,
    done: int,
    metrics: dict[str, float],
    timing: dict[str, float],
    step_time: float,
    train_metrics: dict[str, float] | None = None,
) -> None:
    """Logs a finished step's ``train/`` metrics (adding ``tokens_per_sec`` when ``num_tokens`` is
    there, and the :data:`RANK_METRICS` of ``train_metrics``: model FLOPs, FLOP/s, MFU where the
    peak is known, the ranks' wait for the slowest) and its ``timing/`` seconds per phase, and moves the progress bar (with the reward
    where the loop has one)."""
    if "num_tokens" in metrics:
        metrics["tokens_per_sec"] = metrics["num_tokens"] / max(step_time, 1e-9)
    metrics.update({k: v for k, v in (train_metrics or {}).items() if k in RANK_METRICS})
    logger.log(metrics, step=done, prefix="train")
    logger.log(timing, step=done, prefix="timing")
    logger.progress(done, metrics.get("reward_mean"), metrics["loss"], step_time)
