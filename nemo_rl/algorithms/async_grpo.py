"""GRPO, asynchronous: a trajectory collector samples ahead with the newest weights it has while
the trainer trains on what it sampled before.

Three processes:

- ``TrajectoryCollector`` (a Ray actor, worker group ``collector``) drives the generation ranks
  (``generation.num_workers`` torch workers) and owns the prompt order and the environment. In a
  loop it has the ranks sample one step's groups, scores them, and pushes them, tagged with the
  weight version they were sampled with and their rollout span, into
- ``ReplayBuffer`` (a Ray actor): a bounded first-in-first-out queue of groups. ``take`` hands out
  one step's groups no older than the trainer allows; older ones are dropped and counted.
- The trainer (this driver) runs ``async_grpo_train``: per step it waits for a batch, then
  log-probs, reference, advantage, policy update and weight sync, with GRPO's math
  (``grpo.step_metrics``, ``advantages``, ``ClippedPGLoss``).

Staleness: a group sampled with weight version ``v`` (the weights after ``v`` training steps) may
be trained on at step ``t`` (numbered from 1: it updates version ``t - 1``) when
``t - 1 - v <= max_trajectory_age_steps``. The collector samples for step ``t`` only when
``t - 1 <= v + max_trajectory_age_steps`` and the buffer has room, else it waits
(``rl.async_grpo.wait_for_weights``); so in a steady run nothing is dropped, and with
``max_trajectory_age_steps=0`` it is synchronous GRPO with rollouts in another process. Weights
are delivered while the collector keeps sampling; it loads them between two rollouts, and only
that load pauses it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

import ray
import torch
from pydantic import Field, ValidationInfo, field_validator, model_validator
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

import spanspec
from nemo_rl.algorithms import common
from nemo_rl.algorithms.advantages import group_normalized_advantages
from nemo_rl.algorithms.common import RunResult, RunSummary, Task
from nemo_rl.algorithms.grpo import GRPOConfig, RolloutRunConfig, step_metrics
from nemo_rl.algorithms.loss_functions import ClippedPGLoss
from nemo_rl.data import PromptIterator
from nemo_rl.distributed import (
    RankInfo,
    SpanRef,
    WorkerDied,
    call,
    carries_trace,
    close_worker,
    init_worker,
    span_ref,
    spawn_actor,
)
from nemo_rl.models.generation.group import GenerationGroup
from nemo_rl.models.policy import PolicyGroup, SharedBatch
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger
from nemo_rl.utils.timer import Timer
from spanspec.export import TelemetryCost

__all__ = [
    "AsyncGRPOConfig",
    "AsyncGRPOSetup",
    "MasterConfig",
    "ReplayBuffer",
    "TrajectoryCollector",
    "TrajectoryGroup",
    "async_grpo_train",
    "run",
    "setup",
    "teardown",
]

POLL_S = 0.5
"""How long one ``ReplayBuffer.take`` waits before the trainer checks that the collector lives."""


# -- config -------------------------------------------------------------------------------------


class AsyncGRPOConfig(GRPOConfig):
    """The outer loop: GRPO's keys, plus how far ahead the collector may sample."""

    max_trajectory_age_steps: int = Field(1, ge=0)
    """Train on a trajectory at most this many weight versions after the one that sampled it
    (0: only trajectories of the current weights, i.e. no overlap)."""
    buffer_size: int = Field(512, ge=1)
    """Trajectories (responses) the replay buffer holds; at least one step's batch."""
    collector_timeout_s: float = Field(300.0, gt=0.0)
    """Fail when the trainer has waited this long for one step's trajectories."""

    @field_validator("buffer_size")
    @classmethod
    def _buffer_holds_a_step(cls, value: int, info: ValidationInfo) -> int:
        prompts, group = (
            info.data.get("num_prompts_per_step"),
            info.data.get("num_generations_per_prompt"),
        )
        if prompts is not None and group is not None and value < prompts * group:
            raise ValueError(
                f"{value} is smaller than one step's batch (num_prompts_per_step x "
                f"num_generations_per_prompt = {prompts * group}); set it to at least {prompts * group}"
            )
        return value


class MasterConfig(RolloutRunConfig):
    """A whole async-GRPO run: ``examples/configs/async_grpo_tiny.yaml`` is one."""

    SECTION: ClassVar[str] = "async_grpo"

    async_grpo: AsyncGRPOConfig = Field(default_factory=AsyncGRPOConfig)
    """The outer loop."""

    def ranks(self) -> list[common.Ranks]:
        """The policy ranks, the generation ranks and the collector."""
        a = self.async_grpo
        return [
            *common.rollout_ranks(
                "async_grpo",
                a.num_prompts_per_step,
                a.num_generations_per_prompt,
                {"policy": self.policy},
                self.generation,
            ),
            common.Ranks("the trajectory collector", 1),
        ]

    @model_validator(mode="after")
    def _torch_generation(self) -> MasterConfig:
        if self.generation.backend != "torch":
            raise ValueError(
                f"generation.backend={self.generation.backend!r}: the async-GRPO collector "
                "samples with the torch backend only; set generation.backend=torch"
            )
        return self


# -- the replay buffer and the collector (Ray actors) ---------------------------------------------


@dataclass
class TrajectoryGroup:
    """One prompt's group of responses, as the collector sampled and scored it."""

    output_ids: torch.Tensor
    """``[G, T]`` left-padded prompt plus response."""
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rewards: torch.Tensor
    """``[G]``."""
    exact: float
    """Exact-match share of the rollout the group came from."""
    weight_version: int
    """Training steps in the weights that sampled it."""
    rollout: SpanRef | None
    """The ``rl.async_grpo.rollout`` span that produced it (None when that group is off)."""


class ReplayBuffer:
    """A bounded queue of ``TrajectoryGroup``, oldest first; a threaded Ray actor."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._groups: deque[TrajectoryGroup] = deque()
        self._changed = threading.Condition()

    def size(self) -> int:
        """Returns the trajectories (responses) waiting."""
        with self._changed:
            return self._size()

    def _size(self) -> int:
        return sum(len(g.rewards) for g in self._groups)

    def put(self, groups: list[TrajectoryGroup]) -> int:
        """Appends ``groups``; returns the trajectories waiting. Raises ``ValueError`` when they
        do not fit (the collector checks ``size`` first)."""
        with self._changed:
            new = sum(len(g.rewards) for g in groups)
            if self._size() + new > self.capacity:
                raise ValueError(f"replay buffer full: {self._size()} + {new} > {self.capacity}")
            self._groups.extend(groups)
            self._changed.notify_all()
            return self._size()

    def take(
        self, n: int, min_version: int, timeout_s: float
    ) -> tuple[list[TrajectoryGroup], int, int]:
        """Waits up to ``timeout_s`` for ``n`` groups sampled with weight version ``min_version``
        or newer, and removes them.

        Returns ``(groups, dropped, left)``: the ``n`` groups (or none when time ran out), the
        trajectories dropped meanwhile as older than ``min_version``, and the trajectories left.
        """
        deadline = time.monotonic() + timeout_s
        dropped = 0
        with self._changed:
            while True:
                while self._groups and self._groups[0].weight_version < min_version:
                    dropped += len(self._groups.popleft().rewards)
                if len(self._groups) >= n:
                    taken = [self._groups.popleft() for _ in range(n)]
                    return taken, dropped, self._size()
                left = deadline - time.monotonic()
                if left <= 0:
                    return [], dropped, self._size()
                self._changed.wait(left)

    def close(self) -> None:
        """Nothing to flush (the buffer emits no telemetry)."""


class TrajectoryCollector:
    """Has the generation ranks sample groups, scores them, and pushes them into the replay
    buffer, in its own process.

    A threaded Ray actor: ``run`` loops in one thread while ``update_weights``, ``sync`` and
    ``close`` arrive in others.
    """

    def __init__(
        self,
        cfg: MasterConfig,
        buffer: Any,
        generation: GenerationGroup,
        info: RankInfo | None = None,
    ) -> None:
        init_worker(info or RankInfo.alone("collector"))
        a = cfg.async_grpo
        self.task = common.make_task(cfg, a.seed)
        # Built from the policy's seed by the trainer: the same weights as the policy (version 0).
        self.generation = generation
        self.data = PromptIterator(self.task.train, seed=a.seed)
        self.buffer = buffer
        self.seed = a.seed
        self.P, self.G = a.num_prompts_per_step, a.num_generations_per_prompt
        self.max_age, self.capacity = a.max_trajectory_age_steps, a.buffer_size
        self.version = 0
        self._weights_from: SpanRef | None = None  # the trainer's weight_sync of self.version
        self._pending: tuple[list[Any], int, SpanRef | None] | None = None
        self._pending_lock = threading.Lock()
        self._model_lock = threading.Lock()  # one rollout or weight load at a time
        self._arrived = threading.Event()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    @carries_trace
    def run(self, start_step: int, end_step: int) -> int:
        """Samples for steps ``start_step + 1 .. end_step`` (numbered from 1, as the trainer's; or
        until ``close``); returns how many rollouts it pushed."""
        self._stopped.clear()
        target = start_step + 1
        try:
            while not self._stop.is_set() and target <= end_step:
                if not self._may_sample(target):
                    with spanspec.span(
                        "rl.async_grpo.wait_for_weights",
                        **{"rl.iteration": target, "rl.async.weight_version": self.version},
                    ):
                        while not self._stop.is_set() and not self._may_sample(target):
                            self._arrived.wait(0.1)  # returns at once when weights arrive
                    continue
                self._rollout(target)
                target += 1
        finally:
            self._stopped.set()
        return target - start_step - 1

    def _may_sample(self, target: int) -> bool:
        self._load_pending()
        if target - 1 > self.version + self.max_age:
            return False  # too old by the time step `target` (version target - 1) trains on it
        # The buffer is asked only when the weights are recent enough, so waiting for weights
        # costs no polling; waiting for room polls it every 0.1 s.
        return ray.get(self.buffer.size.remote()) + self.P * self.G <= self.capacity

    def _rollout(self, target: int) -> None:
        P, G = self.P, self.G
        problems = [p for p in self.data.next_batch(P) for _ in range(G)]
        input_ids, attention_mask = common.encode_prompts(self.task, problems)
        with self._model_lock:  # no weights load between reading the version and sampling
            v = self.version
            tag = {"rl.iteration": target, "rl.async.weight_version": v}
            links = [self._weights_from.context()] if self._weights_from else []
            with spanspec.span(
                "rl.async_grpo.rollout",
                links=links,
                **tag,
                **{"rl.num_generations_per_prompt": G, "rl.batch_size": P * G},
            ):
                rollout = span_ref()
                with spanspec.span(
                    "rl.async_grpo.generation", **tag, **{"rl.batch_size": P * G}
                ) as s:
                    # The sampling seed depends only on the step it is for, as in sync GRPO.
                    seed = common.step_seed(self.seed, target)
                    out = self.generation.generate(input_ids, attention_mask, seed=seed)
                    spanspec.annotate(s, **{"rl.num_tokens": common.num_tokens(out)})
                with spanspec.span("rl.async_grpo.reward", **tag) as s:
                    rewards, exact = common.score_responses(
                        self.task, out, problems, input_ids.shape[1]
                    )
                    spanspec.annotate(s, **{"rl.reward.mean": float(rewards.mean())})
        groups = [
            TrajectoryGroup(
                out["output_ids"][rows],
                out["attention_mask"][rows],
                out["response_mask"][rows],
                rewards[rows],
                exact,
                v,
                rollout,
            )
            for rows in (slice(k * G, (k + 1) * G) for k in range(P))
        ]
        ray.get(self.buffer.put.remote(groups))

    def _load_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
            self._arrived.clear()
        if pending is not None:
            (weights,), version, source = pending
            with self._model_lock:
                self.generation.update_weights(weights)  # each rank reads the object store
                self.version, self._weights_from = version, source

    @carries_trace
    def update_weights(self, weights: list[Any], version: int) -> None:
        """Hands over the weights after ``version`` training steps, as ``[ObjectRef]`` (in a list,
        so Ray passes the reference on instead of the weights); the sampling loop loads them into
        the generation ranks before its next rollout (a later delivery replaces one not loaded
        yet)."""
        source = span_ref()  # the trainer's weight_sync span: each rollout links to it
        with self._pending_lock:
            self._pending = (weights, version, source)
            self._arrived.set()

    @carries_trace
    def sync(self) -> int:
        """Loads the newest weights delivered into the generation ranks now (before the trainer
        validates with them); returns their version."""
        self._load_pending()
        return self.version

    @carries_trace
    def data_state(self) -> dict[str, Any]:
        """Returns the prompt iterator's position (past the groups already sampled)."""
        return self.data.state_dict()

    @carries_trace
    def load_data_state(self, state: dict[str, Any]) -> None:
        """Continues sampling prompts from a checkpoint's position."""
        self.data.load_state_dict(state)

    def close(self) -> TelemetryCost | None:
        """Stops the sampling loop (waits for the rollout in progress) and flushes this
        process's telemetry; returns what it cost. The generation ranks are the trainer's to
        stop."""
        self._stop.set()
        self._stopped.wait(timeout=30)
        return close_worker()


# -- setup --------------------------------------------------------------------------------------


@dataclass
class AsyncGRPOSetup:
    """Everything the loop needs, built by ``setup``."""

    cfg: MasterConfig
    task: Task
    policy: PolicyGroup
    """The policy's ranks."""
    generation: GenerationGroup
    """The generation ranks the collector samples with (and validation, after ``sync``)."""
    buffer: Any
    """Ray actor handle of the ``ReplayBuffer``."""
    collector: Any
    """Ray actor handle of the ``TrajectoryCollector``."""
    checkpoints: CheckpointManager | None
    logger: Logger
    """Opened at ``start_step``."""
    start_step: int = 0
    """Steps already done: those of the checkpoint the run resumed from, else 0."""
    timer: Timer = field(default_factory=Timer)
    collecting: Any = None
    """The collector's ``run`` call in flight (an ``ObjectRef``; ready only if it ended)."""


def setup(cfg: MasterConfig) -> AsyncGRPOSetup:
    """Builds the task, the policy worker, the replay buffer and the collector, resumes from the
    latest checkpoint when there is one, and opens the logger at the step it resumed from;
    returns the ``AsyncGRPOSetup``.

    Starts (or joins) Ray if needed. Raises whatever a worker raises while starting.
    """
    common.start_ray(cfg)
    a = cfg.async_grpo
    task = common.make_task(cfg, a.seed)
    timer = Timer()
    with timer.span("rl.async_grpo.model_init", **{"rl.model": cfg.policy.label}):
        temperature = cfg.generation.temperature
        loss = ClippedPGLoss(a.loss, temperature=temperature)
        vocab = task.tokenizer.vocab_size
        policy = common.spawn_policy(cfg.policy, cfg.cluster, vocab, a.seed, loss, temperature)
        generation = common.spawn_policy_generation(cfg, task, a.seed, policy)
        buffer = spawn_actor(ReplayBuffer, a.buffer_size, num_cpus=0, max_concurrency=4)
        collector = spawn_actor(
            TrajectoryCollector,
            cfg,
            buffer,
            generation,
            num_cpus=cfg.cluster.worker_num_cpus,
            max_concurrency=4,
        )
        common.wait_ready(buffer, collector)
    checkpoints = common.checkpoint_manager(cfg.checkpointing, cfg.logger)
    start_step = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        with timer.span("rl.async_grpo.load_checkpoint", **common.resume_attributes(latest)):
            # The policy's weights go to the collector as version `step`, with its data position.
            state = common.read_checkpoint(latest, {"policy": policy})
            start_step = int(state["step"])
            ask(call(collector.load_data_state, state["data"]), "the trajectory collector")
            weights = [policy.state_dict_ref()]
            ask(call(collector.update_weights, weights, start_step), "the trajectory collector")
    logger = common.open_logger(cfg.logger, "async_grpo", a.max_steps, start_step, latest)
    if start_step:
        logger.print(
            f"resumed after step {start_step}: the replay buffer starts empty (trajectories "
            "sampled but not trained on before the checkpoint are not restored)"
        )
    return AsyncGRPOSetup(
        cfg, task, policy, generation, buffer, collector, checkpoints, logger, start_step, timer
    )


def teardown(s: AsyncGRPOSetup) -> list[TelemetryCost]:
    """Stops the collector, flushes the workers' telemetry, stops them and closes the logger;
    returns what each worker's telemetry cost."""
    return common.close_run(s.logger, s.collector, s.generation, s.policy, s.buffer)


def run(cfg: MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """The whole job inside its ``rl.async_grpo.job`` span: setup, train, teardown."""
    with spanspec.span("rl.async_grpo.job", **job_attributes):
        return common.train_in_job(cfg, setup, async_grpo_train, teardown)


# -- the loop -----------------------------------------------------------------------------------


def async_grpo_train(s: AsyncGRPOSetup) -> RunSummary:
    """Runs steps ``s.start_step + 1 .. async_grpo.max_steps`` (numbered from 1) on trajectories the collector
    samples meanwhile; returns a summary of the run (``curves["reward"]``, ``validation``).

    Raises ``WorkerDied`` naming the collector when it dies or produces nothing for
    ``async_grpo.collector_timeout_s``.
    """
    cfg, timer, a = s.cfg, s.timer, s.cfg.async_grpo
    P, G = a.num_prompts_per_step, a.num_generations_per_prompt
    summary = RunSummary(start_step=s.start_step)
    if common.nothing_left(s.logger, "async_grpo", s.start_step, a.max_steps):
        return summary
    if a.val_at_start and s.start_step == 0:
        common.log_validation(s.logger, summary, 0, {"accuracy": validate(s, iteration=0)})

    # From here on the collector samples ahead, in its own process, until teardown.
    s.collecting = call(s.collector.run, s.start_step, a.max_steps)
    timer.take()  # start-up time is not part of the first step
    last_depth = 0  # the buffer starts empty, also on resume

    for step in range(s.start_step + 1, a.max_steps + 1):  # numbered from 1, as printed
        it = {"rl.iteration": step}
        with timer.span("rl.async_grpo.step", **it, **{"rl.algorithm": "async_grpo"}) as step_span:
            # WAIT until the buffer holds one step's groups sampled at most max_age versions ago.
            with timer.span("rl.async_grpo.wait_for_trajectories", **it) as span:
                groups, dropped, depth = take_batch(s, step)
                spanspec.annotate(span, **{"rl.async.queue_size": depth})
            # This step updates policy version step - 1 (the weights after the steps before it).
            age = max(step - 1 - g.weight_version for g in groups)
            spanspec.annotate(
                step_span, **{"rl.async.trajectory_age": age, "rl.async.queue_size": depth}
            )
            for rollout in dict.fromkeys(g.rollout for g in groups if g.rollout):
                step_span.add_link(rollout.context())  # known only now, after the wait

            with timer.span("rl.async_grpo.data_processing", **it, **{"rl.batch_size": P * G}):
                batch, rewards = collate(groups, s.task.tokenizer.pad_token_id)
                exact = sum(g.exact for g in groups) / len(groups)
                num_tokens = int(batch["attention_mask"].sum())  # as common.num_tokens counts
            shared = SharedBatch(batch)  # sent once, read by both log-prob passes
            with timer.span("rl.async_grpo.logprob", **it, **{"rl.batch_size": P * G}):
                batch["prev_logprobs"] = s.policy.get_logprobs(shared)
            with timer.span("rl.async_grpo.reference_policy", **it, **{"rl.batch_size": P * G}):
                batch["ref_logprobs"] = s.policy.get_reference_logprobs(shared)
            with timer.span("rl.async_grpo.advantage", **it):
                batch["advantages"] = group_normalized_advantages(
                    rewards, G, normalize_std=a.normalize_rewards
                )
            with timer.span(
                "rl.async_grpo.policy_update", **it, **{"rl.batch_size": P * G}
            ) as span:
                train_metrics = s.policy.train(batch)
                spanspec.annotate(
                    span, **{"rl.num_micro_batches": train_metrics["num_micro_batches"]}
                )

            # WEIGHT SYNC: version step goes to the collector, which keeps sampling meanwhile.
            with timer.span("rl.async_grpo.weight_sync", **it) as span:
                weights = [s.policy.state_dict_ref()]  # passed on by reference, not through here
                ask(call(s.collector.update_weights, weights, step), "the trajectory collector")
                num_bytes = s.policy.weight_bytes() * s.generation.size  # what the ranks will load
                spanspec.annotate(span, **{"rl.weight_sync.num_bytes": num_bytes})

            if common.is_due(step, a.val_period):
                accuracy = validate(s, iteration=step)
                common.log_validation(s.logger, summary, step, {"accuracy": accuracy})
            if s.checkpoints is not None and common.is_due(
                step, cfg.checkpointing.save_period, a.max_steps
            ):
                save_checkpoint(s, iteration=step)

        timing = timer.take()
        step_time = timing["rl.async_grpo.step"]
        metrics = step_metrics(rewards, exact, batch["response_mask"], train_metrics, num_tokens)
        # queue_delta feeds the up-down counter rl.async.queue_size (whose value is the depth).
        queue = {"queue_size": depth, "queue_delta": depth - last_depth}
        s.logger.log(
            {**queue, "dropped_stale": dropped, "trajectory_age": age}, step=step, prefix="async"
        )
        last_depth = depth
        common.log_step(s.logger, step, metrics, timing, step_time, train_metrics)
        summary.add({"reward": metrics["reward_mean"]})
    return summary


# -- phases used by the loop --------------------------------------------------------------------


def take_batch(s: AsyncGRPOSetup, step: int) -> tuple[list[TrajectoryGroup], int, int]:
    """Returns ``(groups, dropped, left)`` for ``step``: one step's groups sampled at most
    ``max_trajectory_age_steps`` weight versions before the one ``step`` updates (``step - 1``), the trajectories dropped as older, and
    the trajectories left in the buffer.

    Raises ``WorkerDied`` naming the collector (or the buffer) when it died, stopped, or gave
    nothing for ``collector_timeout_s``; every wait is bounded.
    """
    a = s.cfg.async_grpo
    since, dropped = time.monotonic(), 0
    while True:
        try:
            groups, d, left = ray.get(
                s.buffer.take.remote(
                    a.num_prompts_per_step, step - 1 - a.max_trajectory_age_steps, POLL_S
                ),
                timeout=POLL_S + 30,
            )
        except (RayActorError, GetTimeoutError) as e:
            raise WorkerDied(
                f"the replay buffer actor stopped answering: {_first_line(e)}"
            ) from None
        dropped += d
        if groups:
            return groups, dropped, left
        check_collector(s)
        if time.monotonic() - since > a.collector_timeout_s:
            raise WorkerDied(
                f"the trajectory collector produced no trajectories for step {step} in "
                f"{a.collector_timeout_s:.0f} s (async_grpo.collector_timeout_s)"
            )


def check_collector(s: AsyncGRPOSetup) -> None:
    """Returns if the collector's sampling loop is still running; raises ``WorkerDied`` naming
    the collector (and why) if it ended."""
    if s.collecting is None or not ray.wait([s.collecting], timeout=0)[0]:
        return
    try:
        ray.get(s.collecting)
    except (RayActorError, RayTaskError) as e:
        raise WorkerDied(f"the trajectory collector died: {_first_line(e)}") from None
    raise WorkerDied("the trajectory collector stopped sampling before training ended")


def ask(ref: Any, who: str, timeout_s: float = 120.0) -> Any:
    """Returns the result of a call to the actor ``who`` names (``the trajectory collector``);
    raises ``WorkerDied`` naming it if it died or did not answer in ``timeout_s``."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except (RayActorError, GetTimeoutError) as e:
        raise WorkerDied(f"{who} died: {_first_line(e)}") from None


def collate(
    groups: list[TrajectoryGroup], pad_id: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Returns the training batch of ``groups`` (rows of a group adjacent, left-padded to one
    length, as rollouts of different steps may differ) and its rewards ``[B]``."""
    width = max(g.output_ids.shape[1] for g in groups)

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (width - t.shape[1], 0), value=value)

    batch = {
        "input_ids": torch.cat([pad(g.output_ids, pad_id) for g in groups]),
        "attention_mask": torch.cat([pad(g.attention_mask, 0) for g in groups]),
        "response_mask": torch.cat([pad(g.response_mask, 0) for g in groups]),
    }
    return batch, torch.cat([g.rewards for g in groups])


def validate(s: AsyncGRPOSetup, iteration: int) -> float:
    """Returns greedy exact-match accuracy on the held-out problems, sampled by the collector with
    the newest weights (one ``rl.async_grpo.evaluate`` span)."""
    problems = s.task.val
    with s.timer.span(
        "rl.async_grpo.evaluate",
        **{"rl.iteration": iteration, "rl.eval.num_samples": len(problems)},
    ) as span:
        ask(call(s.collector.sync), "the trajectory collector")  # the newest weights first
        accuracy = common.exact_match(s.generation, s.task, problems)
        spanspec.annotate(span, **{"rl.eval.accuracy": accuracy})
    return accuracy


def save_checkpoint(s: AsyncGRPOSetup, iteration: int) -> str:
    """Writes the checkpoint after step ``iteration`` (policy, optimiser, the collector's data
    position, step, RNG); returns its folder. The buffer's contents are not saved."""
    assert s.checkpoints is not None
    with s.timer.span(
        "rl.async_grpo.checkpoint", **common.checkpoint_attributes(s.checkpoints, iteration)
    ):
        data = ask(call(s.collector.data_state), "the trajectory collector")
        return common.write_checkpoint(s.checkpoints, iteration, {"policy": s.policy}, data)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
