"""Starting or joining Ray, and creating worker actors that inherit the driver's telemetry settings."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import ray

import spanspec
from nemo_rl.distributed.trace_context import CARRIER_KWARG
from spanspec import propagate
from spanspec.runtime import active_spec
from spanspec.spec import Spec

__all__ = [
    "WorkerDied",
    "in_ray_actor",
    "init_ray",
    "ray_node_id",
    "spawn_actor",
    "telemetry_env_prefixes",
    "telemetry_env_vars",
]


class WorkerDied(RuntimeError):
    """A worker the driver depends on stopped or went silent; the message names it.

    The entry point reports it as one line and exits 1, or 143 when ``terminated`` (the worker
    was stopped by SIGTERM from outside).
    """

    def __init__(self, message: str, terminated: bool = False) -> None:
        super().__init__(message)
        self.terminated = terminated


def telemetry_env_prefixes(spec: Spec | None = None) -> tuple[str, ...]:
    """Returns the prefixes of the variables every worker inherits: the registry's env prefixes
    (``conventions:``, where init_telemetry_driver wrote the settings before Ray started), then
    ``OTEL_``, the SDK's own (endpoints, headers, resource attributes).

    ``spec`` defaults to the active registry, else the discovered one.

    Raises:
        SpecError: when no registry is active and the discovered one cannot be loaded.
    """
    spec = spec or active_spec() or spanspec.load()
    return (*spec.conventions.env_prefixes, "OTEL_")


def telemetry_env_vars() -> dict[str, str]:
    """Returns the telemetry variables of ``os.environ`` that every worker must see (see
    :func:`telemetry_env_prefixes`)."""
    prefixes = telemetry_env_prefixes()
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why Ray could not join the cluster at ``address`` (``host:port``), or None when its GCS
    answers within ``timeout_s``. Checked before ``ray.init``, which retries a silent address for
    minutes. Ray dials 127.0.0.1 / localhost at this machine's network address, so a cluster
    listening on loopback only is not reachable there: the reason says so."""
    from ray._common.network_utils import is_localhost
    from ray._private.services import canonicalize_bootstrap_address

    if address == "auto":  # the cluster `ray start` left on this machine, if any
        found = canonicalize_bootstrap_address(address)
        if found is None:
            return "no running Ray cluster found on this machine"
        address = found
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        return "expected host:port, such as 127.0.0.1:6379"
    if why := _no_answer(host, int(port), timeout_s):
        return f"nothing answers at {address}: {why}"
    if "://" in address or not is_localhost(host.strip("[]")):
        return None
    dialled = canonicalize_bootstrap_address(address) or address
    host, _, port = dialled.rpartition(":")
    if dialled != address and (why := _no_answer(host, int(port), timeout_s)):
        return (
            f"Ray dials {dialled} for {address} (this machine's address) and nothing answers "
            f"there: {why}; the cluster listens on loopback only"
        )
    return None


def _no_answer(host: str, port: int, timeout_s: float) -> str | None:
    try:
        socket.create_connection((host.strip("[]"), port), timeout=timeout_s).close()
    except OSError as e:
        return e.strerror or str(e)
    return None


_RAY_TOKEN_NOTICE = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Shows only errors from ``logger_name`` while the block runs."""
    log = logging.getLogger(logger_name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def init_ray(num_cpus: int = 4, address: str | None = None) -> dict[str, Any]:
    """Joins ``address`` (or ``$RAY_ADDRESS``) if given, else starts a local cluster; returns its resources.

    The local cluster binds to 127.0.0.1 only and starts no dashboard, so it works inside a
    loopback-only network namespace. ``num_cpus`` is logical: actors ask for fractions of it.
    Does nothing if Ray is already initialised. ``ray.init`` replaces the SIGTERM handler with
    one that raises ``SystemExit`` mid-call; the handler found before (the entry point's, which
    flushes telemetry and stops the workers) is put back.
    """
    main = threading.current_thread() is threading.main_thread()
    stops = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    found = {sig: signal.getsignal(sig) for sig in stops} if main else {}
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        env_vars = telemetry_env_vars()
        runtime_env = {"env_vars": env_vars} if env_vars else None
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        else:
            from nemo_rl.distributed.ray_reaper import clean_orphans, mark_run, start_reaper

            if ended := clean_orphans():
                print(
                    f"ray: ended {len(ended)} Ray processes an earlier run left behind (its "
                    f"driver was killed): pids {', '.join(map(str, ended[:8]))}"
                    + (" ..." if len(ended) > 8 else ""),
                    file=sys.stderr,
                    flush=True,
                )
            # Every process the cluster starts inherits the marker; the reaper ends them by it.
            marker = mark_run()
            # Ray turns token auth on for a new local cluster, as it should, and says so on every
            # run; nothing for the user to do, so the notice is not shown (RAY_AUTH_MODE still
            # chooses, and Ray's other warnings pass).
            with _quiet(_RAY_TOKEN_NOTICE):
                ray.init(
                    # "local" starts a new cluster even when `ray start` left one on this machine,
                    # which a plain ray.init() would join (and then refuse num_cpus).
                    address="local",
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    runtime_env=runtime_env,
                    log_to_driver=True,
                    configure_logging=False,
                    # Ray starts one idle worker per CPU for plain tasks when the driver
                    # connects; a run has only actors, each in a process of its own, so those
                    # would start (importing Ray) and never work (0.7 s of CPU a run).
                    _system_config={"prestart_worker_first_driver": False},
                )
            # If this driver is killed (SIGKILL), nothing of it runs to stop Ray's helpers.
            start_reaper(marker)
    for sig, previous in found.items():  # SIGHUP and SIGINT too: the entry point handles them
        if callable(previous) and signal.getsignal(sig) is not previous:
            signal.signal(sig, previous)
    return ray.cluster_resources()


def spawn_actor(
    cls: type,
    *args: Any,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    max_concurrency: int = 1,
    scheduling_strategy: Any = None,
    **kwargs: Any,
) -> Any:
    """Returns a Ray actor handle for ``cls(*args, **kwargs)`` whose process sees the telemetry env.

    ``max_concurrency`` above 1 makes a threaded actor: that many method calls may run at once
    (a collector that generates in one call while another delivers weights).

    The env is read now, not when Ray started, so settings written after ``init_ray`` still reach
    new workers. A constructor decorated ``@carries_trace`` gets the current trace context.
    """
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "max_concurrency": max_concurrency,
    }
    if scheduling_strategy is not None:  # a rank's bundle in its group's placement group
        options["scheduling_strategy"] = scheduling_strategy
    env_vars = telemetry_env_vars()
    if env_vars:
        options["runtime_env"] = {"env_vars": env_vars}
    if getattr(cls.__init__, "__carries_trace__", False):
        # A constructor that emits spans (loading a model) runs under the caller's span.
        kwargs[CARRIER_KWARG] = propagate.inject()
    return ray.remote(cls).options(**options).remote(*args, **kwargs)


def ray_node_id() -> str | None:
    """Returns the id of the Ray node this process runs on (None outside Ray)."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def in_ray_actor() -> bool:
    """Returns whether this code runs inside a Ray actor process."""
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
