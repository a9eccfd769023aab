"""Ray start-up, worker actors, and trace context on every driver-to-actor call."""

from nemo_rl.distributed.ray_cluster import in_ray_actor, init_ray, spawn_actor, telemetry_env_vars
from nemo_rl.distributed.trace_context import call, carries_trace
from nemo_rl.distributed.worker import close_worker, init_worker

__all__ = [
    "call",
    "carries_trace",
    "close_worker",
    "in_ray_actor",
    "init_ray",
    "init_worker",
    "spawn_actor",
    "telemetry_env_vars",
]
