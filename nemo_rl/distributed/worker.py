"""What every worker actor does first and last: start and flush its telemetry; and, for the ranks
of a trained role, the ``torch.distributed`` process group they average gradients in."""

from __future__ import annotations

import datetime
import os

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
    init_telemetry_worker(
        rank=info.rank,
        world_size=info.world_size,
        worker_group=info.group,
        local_rank=info.local_rank,
        node=info.node,
    )
    measure_cuda_peaks()


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
