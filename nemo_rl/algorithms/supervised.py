"""What SFT, DPO and reward-model training share: one trained model on fixed data.

Each of ``sft.py``, ``dpo.py`` and ``rm.py`` holds its own loop, with its phases as literal
``with timer.span("rl.<algo>.<phase>")`` blocks; what the three have in common is here: the
config blocks (a batch must fit the data), what a run holds (:class:`SupervisedSetup`) and its
teardown, the preference pairs of DPO and RM and their metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from nemo_rl.algorithms import common
from nemo_rl.algorithms.common import LoopConfig, RunConfig, Task
from nemo_rl.data import PreferencePair, PromptIterator, make_preference_pairs
from nemo_rl.models.policy import PolicyGroup
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer
from spanspec.export import TelemetryCost

__all__ = [
    "PairConfig",
    "SupervisedConfig",
    "SupervisedRunConfig",
    "SupervisedSetup",
    "preference_data",
    "preference_metrics",
    "teardown",
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
    section, whose key is ``SECTION`` (``sft``, ``dpo``, ``rm``)."""

    def ranks(self) -> list[common.Ranks]:
        """The trained model's ranks (SFT adds its generation ranks)."""
        s, policy = self.section, self.policy
        size = (
            (f"{self.SECTION}.batch_size", s.batch_size),
            ("policy.train_global_batch_size", policy.train_global_batch_size),
        )
        return [common.Ranks("policy.num_workers", policy.num_workers, size)]

    @model_validator(mode="after")
    def _batch_fits_the_data(self) -> SupervisedRunConfig:
        section: SupervisedConfig = self.section
        task = common.make_task(self, section.seed)
        # From files every line is one example; the built-in task gives several pairs a problem.
        available = len(task.train) * (1 if task.files else section.examples_per_problem())
        if section.batch_size > available:
            where = "data.train_path" if task.files else "the env block"
            raise ValueError(
                f"{self.SECTION}.batch_size={section.batch_size} is more than the {available} "
                f"training examples {where} gives; lower {self.SECTION}.batch_size"
            )
        return self


# -- the run ------------------------------------------------------------------------------------


@dataclass
class SupervisedSetup:
    """Everything an SFT, DPO or RM loop needs, built by its ``setup``."""

    cfg: Any
    """The run's ``MasterConfig`` (a ``SupervisedRunConfig``)."""
    task: Task
    train_data: PromptIterator[Any]
    """Training examples (problems or preference pairs), in a resumable order."""
    val_data: list[Any]
    """Held-out examples, built from problems never trained on."""
    policy: PolicyGroup
    """The trained model's ranks."""
    checkpoints: CheckpointManager | None
    logger: Logger
    """Opened at ``start_step``."""
    start_step: int = 0
    """Steps already done: those of the checkpoint the run resumed from, else 0."""
    timer: Timer = field(default_factory=Timer)
    generation: Any = None
    """SFT's generation worker, which answers held-out prompts; None for DPO and RM."""


def teardown(s: SupervisedSetup) -> list[TelemetryCost]:
    """Flushes the workers' telemetry, stops them and closes the logger; returns what each
    worker's telemetry cost."""
    return common.close_run(s.logger, s.policy, s.generation)


def preference_data(
    task: Task, section: PairConfig
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """Returns the (train, held-out) preference pairs: those of the ``data:`` files, else
    ``pairs_per_problem`` per training problem of the built-in task and one per held-out one."""
    if task.files is not None:
        return task.train, task.val
    return (
        make_preference_pairs(task.train, section.seed, section.pairs_per_problem),
        make_preference_pairs(task.val, section.seed),
    )


def preference_metrics(margin: Any) -> dict[str, float]:
    """Returns ``accuracy`` (share of pairs with ``margin > 0``) and the mean ``margin``."""
    return {"accuracy": float((margin > 0).float().mean()), "margin": float(margin.mean())}
