"""Ray start-up, worker actors, and trace context on every driver-to-actor call."""

from nemo_rl.distributed.ray_cluster import (
    WorkerDied,
    in_ray_actor,
    init_ray,
    spawn_actor,
    telemetry_env_vars,
)
from nemo_rl.distributed.trace_context import SpanRef, call, carries_trace, span_ref
from nemo_rl.distributed.worker import close_worker, init_worker

__all__ = [
    "SpanRef",
    "WorkerDied",
    "call",
    "carries_trace",
    "close_worker",
    "in_ray_actor",
    "init_ray",
    "init_worker",
    "span_ref",
    "spawn_actor",
    "telemetry_env_vars",
]
