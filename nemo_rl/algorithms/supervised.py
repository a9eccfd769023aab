"""What SFT, DPO and reward-model training share: one trained model on fixed data.

Each of ``sft.py``, ``dpo.py`` and ``rm.py`` holds its own loop, with its phases as literal
``with timer.span("rl.<algo>.<phase>")`` blocks; what the three have in common is here: the
config blocks (a batch must fit the data), what a run holds (:class:`SupervisedSetup`) and its
teardown, the preference pairs of DPO and RM and their metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, model_validator

from nemo_rl.algorithms import common
from nemo_rl.algorithms.common import LoopConfig, RunConfig, Task
from nemo_rl.data import PreferencePair, PromptIterator, make_preference_pairs
from nemo_rl.environments import make_problems
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
    section, whose key is ``SECTION``."""

    SECTION: ClassVar[str] = ""
    """The algorithm's section key (``sft``, ``dpo``, ``rm``); set by each subclass."""

    @property
    def section(self) -> SupervisedConfig:
        """Returns the algorithm's own section."""
        return getattr(self, self.SECTION)

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
    """Returns the (train, held-out) preference pairs: ``pairs_per_problem`` per training
    problem, one per held-out problem."""
    return (
        make_preference_pairs(task.train, section.seed, section.pairs_per_problem),
        make_preference_pairs(task.val, section.seed),
    )


def preference_metrics(margin: Any) -> dict[str, float]:
    """Returns ``accuracy`` (share of pairs with ``margin > 0``) and the mean ``margin``."""
    return {"accuracy": float((margin > 0).float().mean()), "margin": float(margin.mean())}
