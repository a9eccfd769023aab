"""Reward model: the tiny Llama with a scalar head, trained Bradley–Terry on preference pairs.

Reads top to bottom: the config, ``setup`` (task, preference pairs, the reward-model worker,
resume), then ``rm_step`` whose phases are literal ``with timer.span("rl.rm.<phase>")`` blocks
named as in ``schemas/span_groups.yaml``. A sequence's reward is the model's value at its last
token; the loss pushes the chosen (right sum) above the rejected (a wrong sum). Validation is
pairwise accuracy on held-out pairs. A checkpoint's ``step_<n>/`` folder is the trained reward
model: ``PolicyConfig(head="scalar", checkpoint=".../step_<n>")`` loads it by path.
"""

from __future__ import annotations

from typing import Any, ClassVar

import ray
from pydantic import Field, model_validator

import spanspec
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import RunSummary, spawn_policy, wait_ready
from nemo_rl.algorithms.loss_functions import BradleyTerryLoss
from nemo_rl.data import encode_preference_pairs, stack_pair_sides
from nemo_rl.distributed import call
from nemo_rl.models.causal_lm import last_token_values
from nemo_rl.models.policy import PolicyConfig
from nemo_rl.utils.timer import annotate

__all__ = ["MasterConfig", "RMConfig", "rm_train", "run", "setup", "validate"]


# -- config -------------------------------------------------------------------------------------


class RMConfig(sv.PairConfig):
    """The outer loop: ``batch_size`` preference pairs per step."""


class MasterConfig(sv.SupervisedRunConfig):
    """A whole reward-model run: ``examples/configs/rm_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "rm"

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


def setup(cfg: MasterConfig) -> sv.LoopState:
    """Builds the task, the pairs, the reward-model worker and the logger, resuming from the
    latest checkpoint when there is one; returns the run's ``LoopState``."""
    task, timer = sv.prepare(cfg)
    with timer.span("rl.rm.model_init", **{"rl.model": cfg.policy.model_name}):
        loss, vocab = BradleyTerryLoss(), task.tokenizer.vocab_size
        model = spawn_policy(cfg.policy, cfg.cluster, vocab, cfg.rm.seed, loss, reference=False)
        wait_ready(model)
    return sv.start(cfg, PHASES, task, sv.preference_data(task, cfg.rm), {"policy": model}, timer)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunSummary:
    """The whole job inside its ``rl.rm.job`` span: setup, train, teardown; returns the summary."""
    with spanspec.span("rl.rm.job", **job_attributes):
        return sv.run_job(setup(cfg))


def rm_train(s: sv.LoopState) -> RunSummary:
    """Runs steps ``s.start_step .. rm.max_steps - 1``; returns the summary (``curves`` of
    ``loss`` and ``preference_accuracy``, ``validation`` with held-out ``accuracy`` and ``margin``)."""
    return sv.train(s)


# -- the phases ---------------------------------------------------------------------------------


def rm_step(s: sv.LoopState, step: int) -> tuple[dict[str, float], dict[str, float] | None]:
    """One step: the next ``rm.batch_size`` pairs, one Bradley–Terry update."""
    size = s.section.batch_size
    with s.timer.span("rl.rm.step", **{"rl.iteration": step, "rl.algorithm": "rm"}):
        # DATA and UPDATE: -log sigmoid(r_chosen - r_rejected) per pair, in micro-batches.
        with s.timer.span("rl.rm.data_processing", **{"rl.iteration": step, "rl.batch_size": size}):
            batch = encode_preference_pairs(s.task.tokenizer, s.train_data.next_batch(size))
        with s.timer.span("rl.rm.policy_update", **sv.update_attributes(s, step)):
            metrics = sv.train_on(s, batch)
        return metrics, sv.end_of_step(s, step)


def validate(s: sv.LoopState, iteration: int) -> dict[str, float]:
    """Returns the held-out pairs' ``accuracy`` (chosen scored above rejected) and the mean
    reward gap ``margin``."""
    with s.timer.span("rl.rm.evaluate", **sv.eval_attributes(s, iteration)) as span:
        both = stack_pair_sides(encode_preference_pairs(s.task.tokenizer, s.val_data))
        values = ray.get(call(s.policy.get_values, both))
        chosen, rejected = last_token_values(values, both["attention_mask"]).chunk(2)
        metrics = sv.preference_metrics(chosen - rejected)
        annotate(span, **{"rl.eval.accuracy": metrics["accuracy"]})
    return metrics


def save_checkpoint(s: sv.LoopState, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (a loadable reward model); returns its folder."""
    with s.timer.span("rl.rm.checkpoint", **sv.checkpoint_attributes(s, iteration)):
        return sv.store(s, iteration)


def load_checkpoint(s: sv.LoopState, path: str) -> None:
    """Restores the checkpoint at ``path``; sets ``s.start_step``."""
    with s.timer.span("rl.rm.load_checkpoint", **sv.load_attributes(path)):
        sv.restore(s, path)


PHASES = sv.Phases(
    rm_step, validate, save_checkpoint, load_checkpoint, headline=("loss", "preference_accuracy")
)
