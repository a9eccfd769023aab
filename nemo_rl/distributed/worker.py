"""What every worker actor does first and last: start and flush its telemetry."""

from __future__ import annotations

import os

import torch

from nemo_rl.distributed.ray_cluster import in_ray_actor, ray_node_id
from nemo_rl.telemetry import init_telemetry_worker, shutdown_telemetry
from spanspec.export import TelemetryCost

__all__ = ["close_worker", "init_worker"]


def init_worker(rank: int, world_size: int, group: str) -> None:
    """Prepares this process as worker ``rank`` of ``world_size`` in ``group``; returns nothing.

    Inside a Ray actor it limits torch to the threads Ray gave it and starts the worker's
    telemetry from the env the driver wrote (the export strategy decides whether this rank
    exports). Outside an actor (a class used in-process by a test) it does nothing, so the
    caller's telemetry is left alone.
    """
    if not in_ray_actor():
        return
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
    init_telemetry_worker(rank=rank, world_size=world_size, worker_group=group, node=ray_node_id())


def close_worker() -> TelemetryCost | None:
    """Flushes and stops this actor's telemetry (bounded; never raises); returns what it cost
    (spans, drops, export and process CPU) for the driver's job line. Does nothing in-process."""
    if not in_ray_actor():
        return None
    stats = shutdown_telemetry()
    return stats.cost() if stats is not None else None
