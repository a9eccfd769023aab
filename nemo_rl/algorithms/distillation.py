"""On-policy distillation: the student samples, a frozen teacher scores every position of the
student's own samples with its whole next-token distribution, and the student minimises the
per-token reverse KL(student || teacher) there (``TeacherKLLoss``).

Reads top to bottom like ``grpo.py``: the config, ``TeacherConfig`` (a bad ``teacher.checkpoint``
is a config error, found as the config loads), ``setup`` (the student's policy and generation
workers, the teacher's worker in its own Ray actor, group ``teacher``, then resume), and
``distillation_train`` whose every phase is one literal ``with timer.span("rl.distillation.<phase>")``
block. ``teacher_training_config`` is the GRPO job ``examples/run_distillation.py`` runs first
when no teacher checkpoint is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, field_validator, model_validator

import spanspec
from nemo_rl.algorithms import common, grpo
from nemo_rl.algorithms.common import RunResult, RunSummary, Task
from nemo_rl.algorithms.loss_functions import TeacherKLLoss, reverse_kl
from nemo_rl.data import PromptIterator, load_tokenizer
from nemo_rl.environments import Problem
from nemo_rl.models.causal_lm import ModelConfig, build_model
from nemo_rl.models.generation.group import GenerationGroup
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.policy import PolicyConfig, PolicyGroup, SharedBatch, read_policy_checkpoint
from nemo_rl.models.pretrained import is_builtin
from nemo_rl.utils.checkpoint import CheckpointConfig, CheckpointManager
from nemo_rl.utils.config import ConfigError
from nemo_rl.utils.logger import Logger, LoggerConfig
from nemo_rl.utils.timer import Timer
from spanspec.export import TelemetryCost

__all__ = [
    "DistillationConfig",
    "DistillationSetup",
    "MasterConfig",
    "TeacherConfig",
    "distillation_train",
    "run",
    "setup",
    "teacher_problem",
    "teacher_training_config",
    "teardown",
]


# -- config -------------------------------------------------------------------------------------


class DistillationConfig(common.OnPolicyLoopConfig):
    """The outer loop (at step 0 the validation also measures the teacher, the target)."""

    max_steps: int = Field(60, ge=1)
    """Training steps of the run (a resumed run continues up to the same number)."""


def _default_teacher() -> TeacherConfig:
    return TeacherConfig(model=ModelConfig(hidden_size=128, intermediate_size=384, num_layers=4))


def _default_student() -> PolicyConfig:
    return PolicyConfig(model=ModelConfig(hidden_size=64, intermediate_size=192, num_layers=2))


class MasterConfig(common.RunSections):
    """A whole distillation run: ``examples/configs/distillation_tiny.yaml`` is one."""

    model_config = ConfigDict(extra="forbid")
    SECTION: ClassVar[str] = "distillation"

    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """How responses are sampled."""
    distillation: DistillationConfig = Field(default_factory=DistillationConfig)
    """The outer loop."""
    policy: PolicyConfig = Field(default_factory=_default_student)
    """The student (the trained model) and its optimiser."""
    teacher: TeacherConfig = Field(default_factory=_default_teacher)
    """The frozen teacher: a larger tiny LM, or a model folder (``teacher.model_name``) with the
    student's vocabulary. ``teacher.checkpoint`` holds trained weights; without one, a folder
    teaches as it is, and the tiny LM is first trained by ``examples/run_distillation.py`` with
    GRPO (``teacher_training``)."""
    teacher_training: grpo.GRPOConfig = Field(default_factory=grpo.GRPOConfig)
    """The GRPO job that trains the teacher when no ``teacher.checkpoint`` is given."""

    def ranks(self) -> list[common.Ranks]:
        """The student, generation and teacher ranks (and, at step 0, the teacher's own
        generation worker that measures it)."""
        d = self.distillation
        ranks = common.rollout_ranks(
            "distillation",
            d.num_prompts_per_step,
            d.num_generations_per_prompt,
            {"policy": self.policy},
            self.generation,
        )
        ranks.append(common.Ranks("teacher.num_workers", self.teacher.num_workers))
        if d.val_at_start:
            ranks.append(common.Ranks("the teacher's evaluation worker (step 0)", 1))
        return ranks

    @field_validator("policy")
    @classmethod
    def _student_is_a_language_model(cls, value: PolicyConfig) -> PolicyConfig:
        if value.head != "lm":
            raise ValueError("the student needs head: lm (a next-token distribution)")
        return value

    @model_validator(mode="after")
    def _teacher_fits_the_student(self) -> MasterConfig:
        # The KL compares the two next-token distributions token by token: one vocabulary.
        vocab = load_tokenizer(self.policy.tokenizer_folder()).vocab_size
        student = self.policy.output_size(vocab)
        if self.teacher.checkpoint:
            problem = teacher_problem(self.teacher.checkpoint, self.teacher, vocab, student)
            if problem:
                raise ValueError(f"teacher.checkpoint: {problem}")
        elif (teacher := self.teacher.output_size(vocab)) != student:
            raise ValueError(
                f"teacher.model_name: the teacher's vocabulary has {teacher} tokens, the "
                f"student's {student}; distillation compares the two next-token distributions "
                "token by token, so they must match (a teacher of the student's model family)"
            )
        return self


def teacher_problem(
    path: str, teacher: PolicyConfig, vocab_size: int, student_rows: int
) -> str | None:
    """Returns why the weights at ``path`` cannot be the teacher (missing, unreadable, another
    vocabulary than the student's ``student_rows`` tokens, another shape than ``teacher``'s model
    with the tokenizer's ``vocab_size``), or None."""
    try:
        state = read_policy_checkpoint(path)["model"]
    except FileNotFoundError:
        return (
            f"{path}: no policy checkpoint there (give a policy.pt or a run's step_<n>/ folder, "
            "or leave teacher.checkpoint unset to train a teacher first)"
        )
    except Exception as e:  # a truncated or foreign file: torch.load / pickle say why
        first = (str(e).strip().splitlines() or [""])[0]
        return f"{path}: cannot read it as a policy checkpoint ({type(e).__name__}: {first})"
    expected = build_model(teacher.model_name, teacher.model, vocab_size, 0, meta=True)
    embedding = expected.get_input_embeddings().weight
    name = next((k for k, v in expected.named_parameters() if v is embedding), None)
    if name is None or name not in state:
        return f"{path}: not a causal LM's weights (no {name or 'input embeddings'})"
    if state[name].shape[0] != student_rows:
        return (
            f"{path}: the teacher's vocabulary has {state[name].shape[0]} tokens, the student's "
            f"{student_rows}; distillation compares the two next-token distributions "
            "token by token, so they must match"
        )
    for key, tensor in expected.state_dict().items():
        if key not in state or state[key].shape != tensor.shape:
            got = tuple(state[key].shape) if key in state else "absent"
            return (
                f"{path} does not fit the teacher's model ({key}: {tuple(tensor.shape)} from "
                f"teacher.model_name / teacher.model, {got} in the checkpoint); set them to "
                "the teacher's"
            )
    return None


class TeacherConfig(PolicyConfig):
    """The frozen teacher: a ``PolicyConfig`` whose ``checkpoint``, when given, is checked with
    the student as the config loads (so a bad one exits 2 before anything starts)."""

    @field_validator("head")
    @classmethod
    def _language_model(cls, head: str) -> str:
        if head != "lm":
            raise ValueError("the teacher needs head: lm (a next-token distribution)")
        return head


def teacher_training_config(cfg: MasterConfig) -> tuple[grpo.MasterConfig, str]:
    """Returns the GRPO run that trains ``cfg``'s teacher (in ``<log_dir>/teacher``) and the
    checkpoint folder it leaves after its last step."""
    log_dir = os.path.join(cfg.logger.log_dir, "teacher")
    steps = cfg.teacher_training.max_steps
    # Trained with the student's tokenizer on the student's task, so the two compare.
    teacher = PolicyConfig(
        **cfg.teacher.model_dump(exclude={"checkpoint", "tokenizer"}),
        tokenizer=cfg.policy.tokenizer_folder(),
    )
    run_cfg = grpo.MasterConfig(
        grpo=cfg.teacher_training,
        policy=teacher,
        generation=cfg.generation,
        env=cfg.env,
        data=cfg.data,
        checkpointing=CheckpointConfig(enabled=True, save_period=steps, keep=1),
        logger=LoggerConfig(log_dir=log_dir, tqdm=cfg.logger.tqdm),
        cluster=cfg.cluster,
        telemetry=cfg.telemetry.model_copy(update={"file_dir": os.path.join(log_dir, "telemetry")}),
    )
    return run_cfg, os.path.join(log_dir, "checkpoints", f"step_{steps}")


# -- setup --------------------------------------------------------------------------------------


@dataclass
class DistillationSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    task: Task
    train_data: PromptIterator[Problem]
    student: PolicyGroup
    """The student's ranks."""
    teacher: PolicyGroup
    """The teacher's ranks (frozen, group ``teacher``)."""
    generation: GenerationGroup
    """The generation ranks."""
    checkpoints: CheckpointManager | None
    logger: Logger
    """Opened at ``start_step``."""
    start_step: int = 0
    """Steps already done: those of the checkpoint the run resumed from, else 0."""
    timer: Timer = field(default_factory=Timer)
    retired: list[TelemetryCost] = field(default_factory=list)
    """Telemetry costs of workers stopped before teardown (the teacher's evaluation worker)."""


def setup(cfg: MasterConfig) -> DistillationSetup:
    """Builds the task, the data and the student's and the teacher's workers, resumes from the
    latest checkpoint when there is one, and opens the logger at the step it resumed from;
    returns the ``DistillationSetup``.

    Raises ``ConfigError`` if the tiny-LM teacher has no ``teacher.checkpoint`` (before Ray starts).
    """
    if not cfg.teacher.checkpoint and is_builtin(cfg.teacher.model_name):
        raise ConfigError(
            ["teacher.checkpoint: not set (examples/run_distillation.py trains a teacher first)"]
        )
    seed = cfg.distillation.seed
    task = common.make_task(cfg, seed)
    vocab = task.tokenizer.vocab_size
    common.start_ray(cfg)
    timer = Timer()
    temperature = cfg.generation.temperature
    with timer.span("rl.distillation.model_init", **{"rl.model": cfg.policy.label}):
        student = common.spawn_policy(
            cfg.policy, cfg.cluster, vocab, seed, TeacherKLLoss(temperature), reference=False
        )
        # The teacher scores at the student's sampling temperature, so the two compare alike.
        teacher = common.spawn_policy(
            cfg.teacher, cfg.cluster, vocab, seed, None, temperature, "teacher", reference=False
        )
        generation = common.spawn_policy_generation(cfg, task, seed, student)
    train_data = PromptIterator(task.train, seed=seed)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.distillation.load_checkpoint", **common.resume_attributes(latest)):
            workers = {"policy": student}
            start_step = common.restore_checkpoint(latest, workers, generation, train_data)
    logger = common.open_logger(
        cfg.logger, "distillation", cfg.distillation.max_steps, start_step, latest
    )
    return DistillationSetup(
        cfg, task, train_data, student, teacher, generation, checkpoints, logger, start_step, timer
    )


def teardown(s: DistillationSetup) -> list[TelemetryCost]:
    """Flushes the workers' telemetry, stops them and closes the logger; returns what each
    worker's telemetry cost."""
    return common.close_run(s.logger, s.student, s.teacher, s.generation) + s.retired


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.distillation.job`` span: setup, train, teardown."""
    with spanspec.span("rl.distillation.job", **job_attributes):
        return common.train_in_job(cfg, setup, distillation_train, teardown)


# -- the loop -----------------------------------------------------------------------------------


def distillation_train(s: DistillationSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. distillation.max_steps`` (numbered from 1); returns a summary of the run.

    The summary's ``curves["kl_to_teacher"]`` holds each step's mean per-token reverse KL on the
    student's fresh samples (before the update), its ``validation`` the student's held-out
    ``accuracy`` (and at step 0 the teacher's, ``teacher_accuracy``).
    """
    cfg, timer = s.cfg, s.timer
    d = cfg.distillation
    sizes = common.batch_attributes(d.num_prompts_per_step, d.num_generations_per_prompt)
    B = sizes["rl.batch_size"]
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "distillation", s.start_step, d.max_steps):
        return summary
    if d.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, validate(s, iteration=0, with_teacher=True))
    timer.take()  # start-up time is not part of step 1

    for step in range(s.start_step + 1, d.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        with timer.span("rl.distillation.step", **it, **{"rl.algorithm": "distillation"}):
            with timer.span("rl.distillation.data_processing", **it, **sizes):
                problems, prompt_ids, prompt_mask = common.draw_prompts(
                    s.task, s.train_data, d.num_prompts_per_step, d.num_generations_per_prompt
                )

            # ROLLOUT: the student samples (its score is only reported: the teacher is the signal).
            with timer.span("rl.distillation.rollout", **it, **{"rl.batch_size": B}):
                with timer.span("rl.distillation.generation", **it, **{"rl.batch_size": B}) as sp:
                    seed = common.step_seed(d.seed, step)
                    out = s.generation.generate(prompt_ids, prompt_mask, seed=seed)
                    spanspec.annotate(sp, **{"rl.num_tokens": common.num_tokens(out)})
                rewards, exact = common.score_responses(s.task, out, problems, prompt_ids.shape[1])
            batch = common.response_batch(out)
            mask = batch["response_mask"]
            shared = SharedBatch(batch)

            # TEACHER: its next-token distribution at every position of the student's samples.
            with timer.span("rl.distillation.teacher_logprob", **it, **{"rl.batch_size": B}):
                batch["teacher_logprobs"] = s.teacher.get_next_token_logprobs(shared)
            # STUDENT: the same positions before the update, for the KL this step starts from.
            with timer.span("rl.distillation.logprob", **it, **{"rl.batch_size": B}):
                student = s.student.get_next_token_logprobs(shared)
                kl = reverse_kl(student, batch["teacher_logprobs"])
                kl_to_teacher = float((kl * mask).sum() / mask.sum().clamp(min=1))

            with timer.span("rl.distillation.policy_update", **it, **{"rl.batch_size": B}) as sp:
                train_metrics = s.student.train(batch)
                spanspec.annotate(
                    sp, **{"rl.num_micro_batches": train_metrics["num_micro_batches"]}
                )
            with timer.span("rl.distillation.weight_sync", **it) as sp:
                num_bytes = common.sync_weights(s.generation, s.student)
                spanspec.annotate(sp, **{"rl.weight_sync.num_bytes": num_bytes})

            if common.is_due(step, d.val_period):
                common.log_validation(s.logger, summary, step, validate(s, iteration=step))
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, d.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        metrics = {
            "kl_to_teacher": kl_to_teacher,
            "reward_mean": float(rewards.mean()),
            "accuracy": exact,
            "response_length": float(mask.sum(-1).float().mean()),
            **{k: train_metrics[k] for k in ("loss", "grad_norm", "lr")},
            "num_tokens": common.num_tokens(out),
        }
        common.log_step(
            s.logger, step, metrics, timing, timing["rl.distillation.step"], train_metrics
        )
        summary.add({"kl_to_teacher": kl_to_teacher, "reward": metrics["reward_mean"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def validate(s: DistillationSetup, iteration: int, with_teacher: bool = False) -> dict[str, float]:
    """Returns the student's greedy exact-match ``accuracy`` on the held-out problems, and with
    ``with_teacher`` the teacher's (``teacher_accuracy``, from a generation worker started for
    it and stopped after); one ``rl.distillation.evaluate`` span."""
    problems = s.task.val
    with s.timer.span(
        "rl.distillation.evaluate",
        **{"rl.iteration": iteration, "rl.eval.num_samples": len(problems)},
    ) as span:
        result = {"accuracy": common.exact_match(s.generation, s.task, problems)}
        spanspec.annotate(span, **{"rl.eval.accuracy": result["accuracy"]})
        if with_teacher:
            result["teacher_accuracy"] = _teacher_accuracy(s, problems)
    return result


def _teacher_accuracy(s: DistillationSetup, problems: list[Problem]) -> float:
    cfg = s.cfg
    generation = common.spawn_generation(
        cfg.generation,
        cfg.teacher.model,
        cfg.teacher.model_name,
        cfg.cluster,
        s.task.tokenizer,
        cfg.distillation.seed,
        s.teacher,
        os.path.join(cfg.logger.log_dir, "teacher_generation"),
        num_workers=1,
    )
    try:
        common.sync_weights(generation, s.teacher)
        return common.exact_match(generation, s.task, problems)
    finally:
        s.retired += common.stop_workers(generation)


def save_checkpoint(s: DistillationSetup, iteration: int) -> str:
    """Writes the student's checkpoint after step ``iteration`` (weights, optimiser, data
    position, step, RNG); returns its folder."""
    assert s.checkpoints is not None
    attributes = common.checkpoint_attributes(s.checkpoints, iteration)
    with s.timer.span("rl.distillation.checkpoint", **attributes):
        data = s.train_data.state_dict()
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.student}, data)
