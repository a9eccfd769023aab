"""The step loop SFT, DPO and reward-model training share: one trained model, fixed data.

Each of ``sft.py``, ``dpo.py`` and ``rm.py`` keeps its own phases as literal
``with timer.span("rl.<algo>.<phase>")`` blocks (so the code scan sees which loop emits which
span) and hands them to this module as :class:`Phases`. What is the same for all three is here:
the config blocks, Ray and the task (:func:`prepare`), the preference pairs, resuming and
opening the logger (:func:`start`), the outer loop with its logging and summary (:func:`train`),
what runs at the end of a step (:func:`end_of_step`), what a checkpoint holds (:func:`store`,
:func:`restore`) and each phase span's attributes (``*_attributes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import ray
from pydantic import Field, model_validator

from nemo_rl.algorithms.common import (
    LoopConfig,
    RunConfig,
    RunSummary,
    Task,
    checkpoint_manager,
    make_task,
    num_micro_batches,
    read_checkpoint,
    stop_workers,
    write_checkpoint,
)
from nemo_rl.data import PreferencePair, PromptIterator, make_preference_pairs
from nemo_rl.distributed import call, init_ray
from nemo_rl.environments import make_problems
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer

__all__ = [
    "LoopState",
    "PairConfig",
    "Phases",
    "SupervisedConfig",
    "SupervisedRunConfig",
    "checkpoint_attributes",
    "end_of_step",
    "eval_attributes",
    "load_attributes",
    "preference_data",
    "preference_metrics",
    "prepare",
    "restore",
    "run_job",
    "start",
    "store",
    "teardown",
    "train",
    "train_on",
    "update_attributes",
]


# -- config -------------------------------------------------------------------------------------


class SupervisedConfig(LoopConfig):
    """The outer loop of a supervised run (the ``sft:``, ``dpo:`` or ``rm:`` section); the keys
    it shares with every loop are ``LoopConfig``'s."""

    batch_size: int = Field(64, ge=1)
    """Examples (problems, or preference pairs) per step; at most the training data."""

    def examples_per_problem(self) -> int:
        """Returns how many training examples one problem gives (1: a prompt -> answer pair)."""
        return 1


class PairConfig(SupervisedConfig):
    """The outer loop of a run on preference pairs (DPO, reward model)."""

    pairs_per_problem: int = Field(2, ge=1, le=10)
    """Preference pairs per problem, each with a different wrong sum as the rejected side."""

    def examples_per_problem(self) -> int:
        """Returns ``pairs_per_problem``."""
        return self.pairs_per_problem


class SupervisedRunConfig(RunConfig):
    """A supervised run config: the shared blocks of ``RunConfig`` plus the algorithm's own
    section, whose key is ``SECTION``."""

    SECTION: ClassVar[str] = ""
    """The algorithm's section key (``sft``, ``dpo``, ``rm``); set by each subclass."""

    @property
    def section(self) -> SupervisedConfig:
        """Returns the algorithm's own section."""
        return getattr(self, self.SECTION)

    @model_validator(mode="after")
    def _batch_fits_the_data(self) -> SupervisedRunConfig:
        section = self.section
        train, _ = make_problems(
            section.seed,
            self.env.max_first,
            self.env.max_second,
            self.env.carry,
            self.env.val_fraction,
        )
        available = len(train) * section.examples_per_problem()
        if section.batch_size > available:
            raise ValueError(
                f"{self.SECTION}.batch_size={section.batch_size} is more than the {available} "
                f"training examples the env block gives; lower {self.SECTION}.batch_size"
            )
        return self


# -- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phases:
    """One loop's phase functions; each opens its own literal ``rl.<algo>.<phase>`` span."""

    step: Callable[[LoopState, int], tuple[dict[str, float], dict[str, float] | None]]
    """Runs step ``i`` inside ``rl.<algo>.step``; returns its train metrics and, when the step
    validated (see :func:`end_of_step`), the validation metrics."""
    validate: Callable[[LoopState, int], dict[str, float]]
    """Evaluates on the held-out data after step ``i``; returns metrics with ``accuracy``."""
    save_checkpoint: Callable[[LoopState, int], str]
    """Writes the checkpoint after step ``i``; returns its folder."""
    load_checkpoint: Callable[[LoopState, str], None]
    """Restores a checkpoint folder (sets ``start_step``)."""
    headline: tuple[str, ...] = ("loss",)
    """Train metrics whose per-step curve goes into the run summary."""


@dataclass
class LoopState:
    """A supervised run: built by :func:`start`, advanced by :func:`train`."""

    cfg: SupervisedRunConfig
    phases: Phases
    task: Task
    train_data: PromptIterator[Any]
    """Training examples (problems or preference pairs), in a resumable order."""
    val_data: list[Any]
    """Held-out examples, built from problems never trained on."""
    workers: dict[str, Any]
    """Ray actor handles by name; ``policy`` is the trained ``PolicyWorker``."""
    checkpoints: CheckpointManager | None
    timer: Timer
    logger: Logger = field(init=False)
    start_step: int = 0

    @property
    def policy(self) -> Any:
        """Returns the trained model's actor."""
        return self.workers["policy"]

    @property
    def section(self) -> Any:
        """Returns the algorithm's config section."""
        return self.cfg.section


def prepare(cfg: SupervisedRunConfig) -> tuple[Task, Timer]:
    """Starts (or joins) Ray; returns the run's task, split by the section's seed, and a fresh
    timer for its phases."""
    init_ray(num_cpus=cfg.cluster.num_cpus, address=cfg.cluster.address)
    return make_task(cfg.env, cfg.section.seed), Timer()


def preference_data(
    task: Task, section: PairConfig
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """Returns the (train, held-out) preference pairs: ``pairs_per_problem`` per training
    problem, one per held-out problem."""
    return (
        make_preference_pairs(task.train, section.seed, section.pairs_per_problem),
        make_preference_pairs(task.val, section.seed),
    )


def start(
    cfg: SupervisedRunConfig,
    phases: Phases,
    task: Task,
    data: tuple[Sequence[Any], Sequence[Any]],
    workers: dict[str, Any],
    timer: Timer,
) -> LoopState:
    """Returns the run over ``data`` (train, held-out), resumed from the latest checkpoint when
    there is one, with its logger open at the start step."""
    train_items, val_items = data
    s = LoopState(
        cfg=cfg,
        phases=phases,
        task=task,
        train_data=PromptIterator(train_items, seed=cfg.section.seed),
        val_data=list(val_items),
        workers=workers,
        checkpoints=checkpoint_manager(cfg.checkpointing, cfg.logger),
        timer=timer,
    )
    if s.checkpoints is not None and (latest := s.checkpoints.latest()) is not None:
        phases.load_checkpoint(s, latest)
    s.logger = Logger(
        cfg.logger, cfg.section.max_steps, initial_step=s.start_step, desc=cfg.SECTION
    )
    return s


def teardown(s: LoopState) -> None:
    """Flushes the workers' telemetry, stops them and closes the logger."""
    stop_workers(*s.workers.values())
    s.logger.close()


def run_job(s: LoopState) -> RunSummary:
    """Trains ``s`` and tears it down, also when training raises; returns the summary. Call it
    inside the loop's job span."""
    try:
        return train(s)
    finally:
        teardown(s)


def train(s: LoopState) -> RunSummary:
    """Runs steps ``s.start_step .. max_steps - 1``; returns the summary of the run.

    Validates at step 0 when asked; after each step logs its train metrics, the step's phase
    times and any validation to ``<log_dir>/metrics.jsonl`` (and through the registry's ``from:``
    map to OpenTelemetry).
    """
    section, name = s.section, s.cfg.SECTION
    summary = RunSummary(start_step=s.start_step)
    if s.start_step >= section.max_steps:
        s.logger.print(
            f"resumed after step {s.start_step}: {name}.max_steps={section.max_steps} is reached, "
            f"nothing to train (raise {name}.max_steps, or start in a new logger.log_dir)"
        )
    if section.val_at_start and s.start_step == 0:
        _log_validation(s, summary, 0, s.phases.validate(s, 0))
    s.timer.take()  # start-up time is not part of step 0

    for step in range(s.start_step, section.max_steps):
        metrics, validation = s.phases.step(s, step)
        done = step + 1
        # After the step span closed, so the step's own time is known.
        timing = s.timer.take()
        step_time = sum(v for k, v in timing.items() if k.endswith(".step"))
        metrics["tokens_per_sec"] = metrics.get("num_tokens", 0.0) / max(step_time, 1e-9)
        s.logger.log(metrics, step=done, prefix="train")
        s.logger.log(timing, step=done, prefix="timing")
        if validation is not None:
            _log_validation(s, summary, done, validation)
        s.logger.progress(done, None, metrics["loss"], step_time)
        summary.add({k: metrics[k] for k in s.phases.headline})
    return summary


def end_of_step(s: LoopState, step: int) -> dict[str, float] | None:
    """Validates and checkpoints when step ``step`` is due to (call it inside the step span);
    returns the validation metrics, or None when the step did not validate."""
    section, done = s.section, step + 1
    validation = None
    if section.val_period and done % section.val_period == 0:
        validation = s.phases.validate(s, step)
    if s.checkpoints is not None and (
        done % s.cfg.checkpointing.save_period == 0 or done == section.max_steps
    ):
        s.phases.save_checkpoint(s, step)
    return validation


def train_on(s: LoopState, batch: dict[str, Any]) -> dict[str, float]:
    """Returns the trained model's metrics after one ``PolicyWorker.train`` on ``batch``."""
    return ray.get(call(s.policy.train, batch))


def store(s: LoopState, iteration: int) -> str:
    """Writes checkpoint ``step_<iteration + 1>`` (model, optimiser, data position, RNG); returns
    its folder. Call it inside the loop's checkpoint span."""
    assert s.checkpoints is not None
    return write_checkpoint(
        s.checkpoints, iteration + 1, {"policy": s.policy}, s.train_data.state_dict()
    )


def restore(s: LoopState, path: str) -> None:
    """Restores the checkpoint at ``path`` into the trained model, the data order and the RNG;
    sets ``s.start_step``. Call it inside the loop's load_checkpoint span."""
    state = read_checkpoint(path, {"policy": s.policy})
    s.train_data.load_state_dict(state["data"])
    s.start_step = int(state["step"])


def update_attributes(s: LoopState, iteration: int) -> dict[str, Any]:
    """Returns the attributes of the policy-update span of step ``iteration``."""
    size = s.section.batch_size
    return {
        "rl.iteration": iteration,
        "rl.batch_size": size,
        "rl.num_micro_batches": num_micro_batches(s.cfg.policy, size),
    }


def eval_attributes(s: LoopState, iteration: int) -> dict[str, Any]:
    """Returns the attributes of the evaluate span after step ``iteration``."""
    return {"rl.iteration": iteration, "rl.eval.num_samples": len(s.val_data)}


def load_attributes(path: str) -> dict[str, Any]:
    """Returns the attributes of the load-checkpoint span of the checkpoint at ``path``."""
    step = CheckpointManager.load_trainer_state(path)["step"]
    return {"rl.checkpoint.path": path, "rl.checkpoint.step": step}


def checkpoint_attributes(s: LoopState, iteration: int) -> dict[str, Any]:
    """Returns the attributes of the checkpoint span after step ``iteration``."""
    assert s.checkpoints is not None
    done = iteration + 1
    return {
        "rl.iteration": iteration,
        "rl.checkpoint.path": f"{s.checkpoints.root}/step_{done}",
        "rl.checkpoint.step": done,
    }


def preference_metrics(margin: Any) -> dict[str, float]:
    """Returns ``accuracy`` (share of pairs with ``margin > 0``) and the mean ``margin``."""
    return {"accuracy": float((margin > 0).float().mean()), "margin": float(margin.mean())}


def _log_validation(
    s: LoopState, summary: RunSummary, done: int, metrics: dict[str, float]
) -> None:
    s.logger.log(metrics, step=done, prefix="validation")
    s.logger.print(
        f"step {done}: validation " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
    )
    summary.validation.append((done, metrics))
