"""Ray start-up, worker groups (a role as N ranks), and trace context on every call."""

from nemo_rl.distributed.ray_cluster import (
    WorkerDied,
    in_ray_actor,
    init_ray,
    spawn_actor,
    telemetry_env_vars,
    unreachable,
)
from nemo_rl.distributed.trace_context import SpanRef, call, carries_trace, span_ref
from nemo_rl.distributed.worker import close_worker, init_worker, join_process_group
from nemo_rl.distributed.worker_group import RankInfo, WorkerGroup, free_port

__all__ = [
    "RankInfo",
    "SpanRef",
    "WorkerDied",
    "WorkerGroup",
    "call",
    "carries_trace",
    "close_worker",
    "free_port",
    "in_ray_actor",
    "init_ray",
    "init_worker",
    "join_process_group",
    "span_ref",
    "spawn_actor",
    "telemetry_env_vars",
    "unreachable",
]
