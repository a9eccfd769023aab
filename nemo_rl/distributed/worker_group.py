"""A role as N ranks: Ray actors of one class, placed with a placement group, called together.

    group = WorkerGroup(PolicyWorker, cfg, ..., name="policy", num_workers=2, num_cpus=1.0)
    group.run_all("load_checkpoint", path)            # every rank, same arguments
    group.run_sharded("get_logprobs", shards)         # rank r gets shards[r], results in rank order
    group.run_first("state_dict")                     # rank 0 only

Placement: one bundle per rank (``num_cpus`` CPUs, and ``num_gpus`` GPUs where the cluster has
them) in one placement group, ``PACK`` (fill a node first) or ``SPREAD`` (across nodes). Each
rank is told who it is (:class:`RankInfo`: group, rank, world size, local rank on its node, the
node) as its constructor's ``info`` keyword, before it starts, so its telemetry resource carries it.

Every call goes through :func:`~nemo_rl.distributed.trace_context.call`, so each rank's spans join
the caller's trace. Waiting is bounded: results are collected as they come, and a rank that died
fails the call at once with :class:`~nemo_rl.distributed.ray_cluster.WorkerDied` naming the group,
the rank, its node and pid, instead of leaving the caller (or the surviving ranks, stuck in a
collective) waiting.
"""

from __future__ import annotations

import os
import socket
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from nemo_rl.distributed.ray_cluster import WorkerDied, spawn_actor
from nemo_rl.distributed.trace_context import call, remember_pid

__all__ = [
    "CLOSE_TIMEOUT_S",
    "PLACEMENT_TIMEOUT_S",
    "Placement",
    "RankInfo",
    "WorkerGroup",
    "close_timeout_s",
    "free_port",
    "stop_promptly",
]

Placement = Literal["pack", "spread"]
PLACEMENT_TIMEOUT_S = 60.0
"""How long a placement group may wait for its resources before the run fails naming them."""
CLOSE_TIMEOUT_S = 30.0
"""How long closing waits, in all, for the workers' own telemetry flush before killing them."""
_close_timeout_s = CLOSE_TIMEOUT_S


def stop_promptly(timeout_s: float) -> None:
    """The run is being stopped (a stop signal): from now on closing waits at most
    ``timeout_s`` in all for the workers' flush, so a stopped or stuck worker (``SIGSTOP``, a
    hung collective) is killed instead of holding the exit for :data:`CLOSE_TIMEOUT_S`."""
    global _close_timeout_s
    _close_timeout_s = min(_close_timeout_s, max(0.0, timeout_s))


def close_timeout_s() -> float:
    """Return how long closing waits, in all, for the workers' flush (see :func:`stop_promptly`)."""
    return _close_timeout_s


@dataclass(frozen=True)
class RankInfo:
    """Who one rank is; every worker class takes it as its constructor's ``info`` keyword."""

    group: str
    """The role (``policy``, ``generation``, ``value``, ``teacher``, ``collector``)."""
    rank: int
    world_size: int
    local_rank: int = 0
    """The rank's index among its group's ranks on the same node."""
    node: str | None = None
    """The Ray node id (None in-process)."""

    @classmethod
    def alone(cls, group: str) -> RankInfo:
        """The only rank of ``group`` (a worker used in-process, or a group of one)."""
        return cls(group, 0, 1)


@dataclass(frozen=True)
class _Where:
    pid: int
    node_ip: str


class WorkerGroup:
    """``num_workers`` Ray actors of ``cls``, rank ``r`` built as ``cls(*args, info=..., **kwargs)``.

    Raises (at construction) ``WorkerDied`` naming the resources asked for and those present when
    the cluster cannot place the group within :data:`PLACEMENT_TIMEOUT_S`, and whatever a rank's
    constructor raises.
    """

    def __init__(
        self,
        cls: type,
        *args: Any,
        name: str,
        num_workers: int = 1,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        placement: Placement = "pack",
        max_concurrency: int = 1,
        **kwargs: Any,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"{name}: num_workers={num_workers}, expected at least 1")
        self.name = name
        bundle = {k: v for k, v in (("CPU", num_cpus), ("GPU", num_gpus)) if v}
        if not bundle:
            raise ValueError(f"{name}: a rank must ask for some CPU or GPU")
        self._pg = placement_group(
            [dict(bundle) for _ in range(num_workers)], strategy=placement.upper()
        )
        _wait_placed(self._pg, name, num_workers, bundle)
        nodes = placement_group_table(self._pg)["bundles_to_node_id"]
        self.infos: list[RankInfo] = []
        seen: dict[str, int] = {}
        for rank in range(num_workers):
            node = nodes[rank]
            self.infos.append(RankInfo(name, rank, num_workers, seen.get(node, 0), node))
            seen[node] = seen.get(node, 0) + 1
        self.actors = [
            spawn_actor(
                cls,
                *args,
                info=info,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                max_concurrency=max_concurrency,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=info.rank
                ),
                **kwargs,
            )
            for info in self.infos
        ]
        for rank, actor in enumerate(self.actors):  # a dead actor's error names it by its id
            _RANKS[actor._actor_id.hex()] = (weakref.ref(self), rank)
        self._broken = False  # a rank died: the others may be stuck in a collective
        self._closing: list[Any] | None = None  # the ranks' close() calls, once asked
        self.last_seconds: list[float] = [0.0] * num_workers
        """Seconds from the last gathered call until each rank's answer (rank order)."""
        self._where: list[_Where | None] = [None] * num_workers
        wheres = self._gather([a.__ray_call__.remote(_where) for a in self.actors], "starting")
        for rank, (actor, where) in enumerate(zip(self.actors, wheres, strict=True)):
            self._where[rank] = where
            remember_pid(actor, where.pid)

    @property
    def size(self) -> int:
        """The number of ranks."""
        return len(self.actors)

    def describe(self, rank: int) -> str:
        """``policy rank 1 (node 3f2a9c01, pid 4711)``: how messages name a rank."""
        info, where = self.infos[rank], self._where[rank]
        node = (info.node or "?")[:8]
        pid = f", pid {where.pid}" if where else ""
        return f"{self.name} rank {rank} (node {node}{pid})"

    # -- calls --------------------------------------------------------------------------------

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Calls ``method(*args, **kwargs)`` on every rank; returns the results in rank order."""
        refs = [self.call(r, method, *args, **kwargs) for r in range(self.size)]
        return self._gather(refs, method)

    def run_sharded(
        self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any
    ) -> list[Any]:
        """Calls ``method(shards[r], *args, **kwargs)`` on rank ``r``; returns the results in rank
        order. Raises ``ValueError`` unless there is one shard per rank."""
        if len(shards) != self.size:
            raise ValueError(f"{self.name}: {len(shards)} shards for {self.size} ranks")
        refs = [self.call(r, method, s, *args, **kwargs) for r, s in enumerate(shards)]
        return self._gather(refs, method)

    def call(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``method`` on rank ``rank``; returns its ``ObjectRef`` (collect the refs of one
        call with :meth:`gather`)."""
        return call(getattr(self.actors[rank], method), *args, **kwargs)

    def gather(self, refs: Sequence[Any], what: str) -> list[Any]:
        """Returns the results of ``refs`` (``refs[i]`` from rank ``i``), waiting as
        :meth:`run_all` does."""
        return self._gather(list(refs), what)

    def run_first(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``method`` on rank 0 only; returns its result."""
        return self._gather([self.ref_first(method, *args, **kwargs)], method)[0]

    def ref_first(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``method`` on rank 0 and returns its ``ObjectRef`` without waiting (weights to
        pass on to another group through the object store, not through the caller)."""
        return self.call(0, method, *args, **kwargs)

    def _gather(self, refs: list[Any], what: str, timeout_s: float | None = None) -> list[Any]:
        """Results of ``refs`` (one per rank, rank order), collected as they finish: a rank that
        died raises ``WorkerDied`` at once, even while the others still run."""
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        began = time.monotonic()
        deadline = None if timeout_s is None else began + timeout_s
        seconds = [0.0] * len(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in ready:
                rank = index[ref]
                seconds[rank] = time.monotonic() - began
                try:
                    results[rank] = ray.get(ref)
                except RayTaskError as e:
                    # An argument of the call was another group's result, and that rank died
                    # (weights passed on through the object store): name the rank that died.
                    died = _rank_of(e.cause) if isinstance(e.cause, RayActorError) else None
                    if died is None:
                        raise  # the rank raised: the entry point names the call and the cause
                    raise died[0]._died(died[1], e.cause, what) from None
                except RayActorError as e:
                    raise self._died(rank, e, what) from None
            if deadline is not None and time.monotonic() > deadline:
                late = ", ".join(self.describe(index[r]) for r in pending)
                raise WorkerDied(
                    f"{self.name}: no answer to {what} from {late} in {timeout_s:.0f} s"
                )
        if len(refs) == self.size:
            self.last_seconds = seconds
        return results

    def _died(self, rank: int, e: RayActorError, what: str) -> WorkerDied:
        """The error to raise for ``rank``, dead (or stopped from outside) during ``what``."""
        self._broken = True
        if "receives a SIGTERM" in str(e):  # stopped from outside, not a crash
            return WorkerDied(
                f"{self.describe(rank)} was terminated by SIGTERM during {what}", terminated=True
            )
        return WorkerDied(f"{self.describe(rank)} died during {what}: {_cause(e)}")

    # -- the end ------------------------------------------------------------------------------

    def begin_close(self) -> None:
        """Asks every rank to flush its telemetry and returns at once; :meth:`close` then waits
        for those calls. Groups closed together flush at the same time, not one after another."""
        if not self._broken and self._closing is None:
            self._closing = [a.close.remote() for a in self.actors]

    def close(self) -> list[Any]:
        """Flushes every rank's telemetry (``close()``, bounded), stops the actors and frees the
        placement group; returns what each live rank's ``close()`` returned (a rank that already
        died is skipped). After a rank died the others are killed at once: they may be stuck in a
        collective waiting for it, and would not answer."""
        out = []
        if not self._broken:
            self.begin_close()
            refs = self._closing or []
            # One deadline for all ranks: a rank that does not answer in time (stopped, stuck)
            # is killed below with the others.
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=close_timeout_s())
            for ref in refs:
                if ref not in done:
                    continue
                try:
                    out.append(ray.get(ref, timeout=0))
                except (RayActorError, RayTaskError, GetTimeoutError):
                    pass  # a dead rank has nothing left to flush; the run already failed
        for actor in self.actors:
            ray.kill(actor)
        try:
            remove_placement_group(self._pg)
        except Exception:  # Ray already shut down
            pass
        return out


def _wait_placed(pg: Any, name: str, num_workers: int, bundle: dict[str, float]) -> None:
    """Returns once ``pg`` is placed; raises ``WorkerDied`` naming what was asked and what the
    cluster has when it cannot be placed in time."""
    try:
        ray.get(pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
        return
    except GetTimeoutError:
        pass
    remove_placement_group(pg)
    asked = ", ".join(f"{v * num_workers:g} {k}" for k, v in bundle.items())
    have = ray.cluster_resources()
    present = ", ".join(f"{have.get(k, 0):g} {k}" for k in bundle)
    raise WorkerDied(
        f"{name}: {num_workers} ranks ({asked}) could not be placed in {PLACEMENT_TIMEOUT_S:.0f} s; "
        f"the cluster has {present} in all (other groups hold some); lower the ranks or add nodes"
    )


_RANKS: dict[str, tuple[weakref.ref[WorkerGroup], int]] = {}
"""Every rank's actor id (hex) -> its group and rank."""


def _rank_of(e: RayActorError) -> tuple[WorkerGroup, int] | None:
    """The group and rank of the actor ``e`` says died, if it was one of ours."""
    found = _RANKS.get(getattr(e, "actor_id", None) or "")
    group = found[0]() if found else None
    return (group, found[1]) if group is not None and found else None


def _where(_actor: Any) -> _Where:
    return _Where(os.getpid(), ray.util.get_node_ip_address())


def _cause(e: BaseException) -> str:
    text = str(e)
    marker = "Worker exit detail:"
    if marker in text:
        return text.split(marker, 1)[1].strip().splitlines()[0].strip().rstrip(".") or "died"
    return (text.strip().splitlines() or [type(e).__name__])[0]


def free_port(host: str = "") -> int:
    """Returns a TCP port free on this host now (for a rendezvous; never a fixed port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
