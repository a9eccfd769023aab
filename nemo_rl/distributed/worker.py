"""What every worker actor does first: set its torch threads and start its telemetry."""

from __future__ import annotations

import os

import torch

from nemo_rl.distributed.ray_cluster import in_ray_actor

__all__ = ["init_worker"]


def init_worker(rank: int, world_size: int, group: str) -> None:
    """Prepares this process as worker ``rank`` of ``world_size`` in ``group``; returns nothing.

    Inside a Ray actor it starts the worker's telemetry (which decides from the export strategy
    whether this rank exports) and limits torch to the threads Ray gave it. Outside an actor (a
    unit test using the class in-process) it does nothing, so the caller's telemetry is untouched.
    """
    if not in_ray_actor():
        return
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(max(1, threads))
    from nemo_rl.telemetry import init_telemetry_worker

    init_telemetry_worker(rank=rank, world_size=world_size, worker_group=group)
