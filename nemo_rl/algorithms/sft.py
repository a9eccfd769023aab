"""SFT: next-token loss on prompt -> answer pairs of the arithmetic task, masked to the answer.

Reads top to bottom: the config, ``setup`` (task, the policy worker and a generation worker for
greedy evaluation, resume), then ``sft_step`` whose phases are literal
``with timer.span("rl.sft.<phase>")`` blocks named as in ``schemas/span_groups.yaml``.
Validation is greedy exact match on held-out problems: the generation worker gets the trained
weights, then answers every held-out prompt. The outer loop, logging and checkpoint contents are
shared with DPO and RM in ``supervised.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import ray
from pydantic import Field

import spanspec
from nemo_rl.algorithms import supervised as sv
from nemo_rl.algorithms.common import (
    RunSummary,
    exact_match,
    spawn_policy,
    spawn_policy_generation,
    wait_ready,
)
from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.data import encode_completions
from nemo_rl.distributed import call
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.utils.timer import annotate

__all__ = ["MasterConfig", "SFTConfig", "run", "setup", "sft_train", "validate"]


# -- config -------------------------------------------------------------------------------------


class SFTConfig(sv.SupervisedConfig):
    """The outer loop: ``batch_size`` problems per step, each trained on its answer."""


class MasterConfig(sv.SupervisedRunConfig):
    """A whole SFT run: ``examples/configs/sft_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "sft"

    sft: SFTConfig = Field(default_factory=SFTConfig)
    """The outer loop."""
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """The worker that answers held-out prompts greedily for validation."""


# -- setup --------------------------------------------------------------------------------------


def setup(cfg: MasterConfig) -> sv.LoopState:
    """Builds the task, the Ray workers and the logger, resuming from the latest checkpoint when
    there is one; returns the run's ``LoopState``. Starts Ray if needed."""
    task, timer = sv.prepare(cfg)
    seed = cfg.sft.seed
    with timer.span("rl.sft.model_init", **{"rl.model": cfg.policy.model_name}):
        vocab = task.tokenizer.vocab_size
        policy = spawn_policy(cfg.policy, cfg.cluster, vocab, seed, NLLLoss(), reference=False)
        generation = spawn_policy_generation(cfg, task, seed, policy)
        wait_ready(policy, generation)
    workers = {"policy": policy, "generation": generation}
    return sv.start(cfg, PHASES, task, (task.train, task.val), workers, timer)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunSummary:
    """The whole job inside its ``rl.sft.job`` span: setup, train, teardown; returns the summary."""
    with spanspec.span("rl.sft.job", **job_attributes):
        return sv.run_job(setup(cfg))


def sft_train(s: sv.LoopState) -> RunSummary:
    """Runs steps ``s.start_step .. sft.max_steps - 1``; returns the summary (``curves["loss"]``,
    ``validation`` with the held-out exact-match ``accuracy``)."""
    return sv.train(s)


# -- the phases ---------------------------------------------------------------------------------


def sft_step(s: sv.LoopState, step: int) -> tuple[dict[str, float], dict[str, float] | None]:
    """One step: the next ``sft.batch_size`` problems, one NLL update on their answers."""
    size, it = s.section.batch_size, {"rl.iteration": step}
    with s.timer.span("rl.sft.step", **it, **{"rl.algorithm": "sft"}):
        # DATA: <bos> prompt answer <eos>, the loss masked to the answer and its eos.
        with s.timer.span("rl.sft.data_processing", **it, **{"rl.batch_size": size}):
            problems = s.train_data.next_batch(size)
            prompts, answers = [p.prompt for p in problems], [p.answer for p in problems]
            batch = encode_completions(s.task.tokenizer, prompts, answers)
        # POLICY UPDATE: token-mean NLL of the answers, in micro-batches.
        with s.timer.span("rl.sft.policy_update", **sv.update_attributes(s, step)):
            metrics = sv.train_on(s, batch)
        return metrics, sv.end_of_step(s, step)


def validate(s: sv.LoopState, iteration: int) -> dict[str, float]:
    """Returns ``{"accuracy": ...}``: greedy exact match on the held-out problems, answered by
    the generation worker after it received the trained weights."""
    with s.timer.span("rl.sft.evaluate", **sv.eval_attributes(s, iteration)) as span:
        generation = s.workers["generation"]
        ray.get(call(generation.update_weights, call(s.policy.state_dict)))
        accuracy = exact_match(generation, s.task, s.val_data)
        annotate(span, **{"rl.eval.accuracy": accuracy})
    return {"accuracy": accuracy}


def save_checkpoint(s: sv.LoopState, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration``; returns its folder."""
    with s.timer.span("rl.sft.checkpoint", **sv.checkpoint_attributes(s, iteration)):
        return sv.store(s, iteration)


def load_checkpoint(s: sv.LoopState, path: str) -> None:
    """Restores the checkpoint at ``path``; sets ``s.start_step``."""
    with s.timer.span("rl.sft.load_checkpoint", **sv.load_attributes(path)):
        sv.restore(s, path)


PHASES = sv.Phases(sft_step, validate, save_checkpoint, load_checkpoint)
