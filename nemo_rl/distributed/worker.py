"""What every worker actor does first and last: start and flush its telemetry; and, for the ranks
of a trained role, the ``torch.distributed`` process group they average gradients in."""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from types import FrameType

import torch
import torch.distributed as dist

from nemo_rl.distributed.ray_cluster import in_ray_actor
from nemo_rl.distributed.worker_group import RankInfo
from nemo_rl.telemetry import init_telemetry_worker, shutdown_telemetry
from nemo_rl.telemetry.resources import measure_cuda_peaks
from spanspec.export import TelemetryCost

__all__ = ["COLLECTIVE_TIMEOUT_S", "close_worker", "init_worker", "join_process_group"]

COLLECTIVE_TIMEOUT_S = 300
"""How long a collective may wait for a rank before it fails (the driver names a dead rank long
before: this only frees the ranks left waiting)."""


def init_worker(info: RankInfo) -> None:
    """Prepares this process as rank ``info.rank`` of ``info.world_size`` in ``info.group``.

    Inside a Ray actor it limits torch to the threads Ray gave it and starts the worker's
    telemetry from the env the driver wrote (the export strategy decides whether this rank
    exports); the rank, world size, local rank, node and group go on its resource; where torch
    sees a GPU, every measured worker span records its CUDA memory peaks too. Outside an actor (a
    class used in-process by a test) it does nothing, so the caller's telemetry is left alone.
    """
    if not in_ray_actor():
        return
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
    _stop_only_where_ray_can(signal.SIGTERM)
    init_telemetry_worker(
        rank=info.rank,
        world_size=info.world_size,
        worker_group=info.group,
        local_rank=info.local_rank,
        node=info.node,
    )
    measure_cuda_peaks()


STOP_DEFER_S = 5.0
"""How long a stop signal may wait for a point where Ray can end the worker cleanly; after
that it ends it wherever it is (Ray's own behaviour)."""


def _stop_only_where_ray_can(signum: int) -> None:
    """Ray's worker ends on SIGTERM by raising ``SystemExit`` wherever the signal lands. Landing
    in Ray's own code around a task (between tasks' context managers, not in a method) crashes
    the worker on a check of the task's returns (Ray 2.60; ray-project/ray#57247): the driver
    then reads a crash, not a stop (42 of 60 SIGTERMs to a busy actor here). So the exit is
    raised only inside a method or while the worker waits for a task; in between, the signal
    is sent again 50 ms later. Needs the main thread (where Python runs signal handlers)."""
    ray_handler = signal.getsignal(signum)
    if threading.current_thread() is not threading.main_thread() or not callable(ray_handler):
        return
    since: float | None = None  # when the first signal came

    def handler(sig: int, frame: FrameType | None) -> None:
        nonlocal since
        since = since or time.monotonic()
        if _safe_to_exit(frame) or time.monotonic() - since > STOP_DEFER_S:
            ray_handler(sig, frame)
            return
        threading.Timer(0.05, os.kill, (os.getpid(), sig)).start()

    signal.signal(signum, handler)


def _safe_to_exit(frame: FrameType | None) -> bool:
    """Whether ``frame`` (where a signal landed) is Ray's wait for a task (``main_loop``) or
    inside an actor method (below Ray's ``actor_method_executor``)."""
    if frame is None or frame.f_code.co_name == "main_loop":
        return True
    while frame is not None:
        if frame.f_code.co_name == "actor_method_executor":
            return True
        frame = frame.f_back
    return False


def join_process_group(info: RankInfo, address: str, port: int) -> None:
    """Joins this rank to its group's ``torch.distributed`` process group (gloo on a CPU, NCCL
    on a GPU), meeting at rank 0's ``address:port``; returns once every rank has joined. Does
    nothing for a group of one."""
    if info.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}:{port}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )


def close_worker() -> TelemetryCost | None:
    """Flushes and stops this actor's telemetry (bounded; never raises) and leaves its process
    group; returns what its telemetry cost (spans, drops, export and process CPU) for the
    driver's job line. Does nothing in-process."""
    if not in_ray_actor():
        return None
    if dist.is_initialized():
        dist.destroy_process_group()
    stats = shutdown_telemetry()
    return stats.cost() if stats is not None else None
