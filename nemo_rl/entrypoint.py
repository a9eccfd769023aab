"""The one entry-point path every ``examples/run_<algo>.py`` shares.

    sys.exit(run_loop(Loop("sft", MasterConfig, run, DEFAULT_CONFIG), doc=__doc__))

It parses ``--config`` and dotted overrides, validates the whole config (before Ray or any
worker starts), starts the driver's telemetry, runs the loop inside its job span, shuts Ray and
telemetry down, and prints the run's summary, the job's telemetry cost (one line: spans, drops,
export CPU as a share of the run's CPU, driver and workers together) and where the step time went.

Every expected failure becomes one short message and an exit code, never a traceback: a bad
config or telemetry setting exits 2 (the message names the file, key or variable), a worker that
died exits 1 naming the worker. A traceback means a bug.

SIGTERM (to the driver, or to a worker) ends the run cleanly: the driver's telemetry is flushed
within its shutdown bound with every open span, the job span included, ended as
``spanspec.truncated``; the workers are stopped and flushed, Ray is shut down (no process left)
and the exit code is 143 (128 + SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from nemo_rl.algorithms.common import RunResult, cluster_address_problem
from nemo_rl.distributed import WorkerDied
from nemo_rl.telemetry import (
    RunIdentity,
    init_telemetry_driver,
    job_cost,
    shutdown_telemetry,
    stragglers,
)
from nemo_rl.telemetry.breakdown import rank_section
from nemo_rl.telemetry.config import STRAGGLER_THRESHOLD
from nemo_rl.utils.config import ConfigError, load_config
from spanspec.export import ExportStats
from spanspec.findings import SpecError
from spanspec.settings import SettingsError
from spanspec.traces.breakdown import step_breakdown

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_TERMINATED", "Loop", "run_loop"]

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass(frozen=True)
class Loop:
    """One algorithm as the entry point sees it."""

    name: str
    """The algorithm (``grpo``, ``sft``, ...): the config section and ``rl.algorithm``."""
    config: type[BaseModel]
    """The run config model (``MasterConfig`` of the algorithm's module)."""
    run: Callable[[Any, dict[str, Any]], RunResult]
    """``run(cfg, job_attributes)``: opens the loop's job span, sets up, trains, tears down;
    returns the summary and the workers' telemetry costs."""
    default_config: str
    """The config file used when ``--config`` is not given."""
    report: Callable[[str, str | None], str] | None = None
    """Optional extra report from the trace file and run id, printed after the breakdown."""


def run_loop(loop: Loop, argv: Sequence[str] | None = None, doc: str | None = None) -> int:
    """Runs ``loop`` from the command line ``argv``; returns the process exit code."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=loop.default_config, help="YAML run config")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides, loop.config)
        identity = RunIdentity(
            algorithm=loop.name,
            model=cfg.policy.model_name,
            run_dir=cfg.logger.log_dir,
            max_steps=getattr(cfg, loop.name).max_steps,
        )
        if problem := cluster_address_problem(cfg.cluster):  # before anything starts
            raise ConfigError([problem])
        # Telemetry first: it writes NEMO_RL_OTEL_* for the Ray workers, so it precedes ray.init.
        handle = init_telemetry_driver(cfg.telemetry, identity)
    except (ConfigError, SettingsError, SpecError, ValidationError) as e:
        return _fail(str(e), EXIT_BAD_INPUT)
    except OSError as e:
        return _fail(f"telemetry: cannot write {e.filename or ''}: {e.strerror or e}", 2)

    settings = handle.settings
    print(f"telemetry: {handle.destinations()}", flush=True)  # where each signal goes
    threshold = settings.extra.get("straggler_threshold", STRAGGLER_THRESHOLD.default)
    stragglers.configure(threshold)
    terminate = _Terminate()
    try:
        with terminate:
            result = loop.run(cfg, identity.job_attributes(settings))
    except ConfigError as e:  # found only once data or a checkpoint was read
        return _fail(str(e), EXIT_BAD_INPUT, shutdown=True)
    except _worker_errors() as e:
        if terminate.received:  # the teardown after SIGTERM found a worker already gone
            return _fail("terminated by SIGTERM", EXIT_TERMINATED, shutdown=True)
        message, code = _worker_failure(e)
        return _fail(message, code, shutdown=True)
    except WorkerDied as e:  # the loop found a worker dead or silent and said which
        return _fail(str(e), EXIT_TERMINATED if e.terminated else EXIT_FAILED, shutdown=True)
    except (KeyboardInterrupt, SystemExit):
        # SIGTERM reaches a blocked ray.get as KeyboardInterrupt or SystemExit, whichever Ray
        # makes of it; only the flag says it was ours.
        if not terminate.received:
            _shutdown()
            raise
        return _fail("terminated by SIGTERM", EXIT_TERMINATED, shutdown=True)
    stats = _shutdown()

    for line in result.summary.lines():
        print(line)
    if settings.enabled:
        print(job_cost(stats, result.worker_costs).line())
    print(f"metrics: {os.path.join(cfg.logger.log_dir, 'metrics.jsonl')}")
    trace_file = os.path.join(settings.file_dir, "traces.jsonl")
    if settings.enabled and "file" in settings.exporters and os.path.exists(trace_file):
        print(step_breakdown(trace_file, run_id=settings.run_id))
        peak = cfg.cluster.peak_flops_per_worker if hasattr(cfg, "cluster") else None
        if section := rank_section(trace_file, settings.run_id, threshold, peak):
            print(section)
        if loop.report is not None:
            print(loop.report(trace_file, settings.run_id))
        print(f"traces: {trace_file}  (view a step: spanspec view {trace_file})")
        report = os.path.join(cfg.logger.log_dir, "report.html")
        print(f"report: spanspec report {cfg.logger.log_dir} -o {report}")
    return 0


class _Terminate:
    """While entered, SIGTERM flushes the driver's telemetry (ending open spans as truncated)
    and unwinds the run with KeyboardInterrupt, so its teardown still stops the workers.

    ``ray.init`` installs its own SIGTERM handler; :func:`nemo_rl.distributed.init_ray` puts
    back the one it found, which is this one. A second SIGTERM during the teardown is ignored.
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> _Terminate:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received:
            return
        self.received = True
        shutdown_telemetry()  # bounded; open spans, the job span too, end as truncated
        raise KeyboardInterrupt("SIGTERM")


def _shutdown() -> ExportStats | None:
    import ray

    ray.shutdown()
    return shutdown_telemetry()


def _fail(message: str, code: int, shutdown: bool = False) -> int:
    if shutdown:
        _shutdown()
    print(f"error: {message}", file=sys.stderr)
    return code


def _worker_errors() -> tuple[type[BaseException], ...]:
    from ray.exceptions import RayActorError, RayTaskError

    return (RayActorError, RayTaskError)


def _worker_failure(e: BaseException) -> tuple[str, int]:
    """One line naming the worker and the cause, and the exit code (143 when it got SIGTERM)."""
    # Ray's message holds the worker's whole traceback; one line names the call and the cause.
    from ray.exceptions import RayTaskError

    if isinstance(e, RayTaskError):
        cause = e.cause if isinstance(e.cause, BaseException) else e
        first = (str(cause).strip().splitlines() or [""])[0]
        return (
            f"{e.function_name} failed in its worker (pid {e.pid}): {type(cause).__name__}: {first}",
            EXIT_FAILED,
        )
    text = str(e)
    fields = dict(_ray_fields(text))
    worker = fields.get("class_name", "a worker")
    where = ", ".join(f"{k} {fields[k]}" for k in ("pid", "name") if fields.get(k))
    name = f"worker {worker}" + (f" ({where})" if where else "")
    if "receives a SIGTERM" in text:
        return f"{name} was terminated by SIGTERM", EXIT_TERMINATED
    detail = fields.get("detail") or (text.strip().splitlines() or ["died"])[0]
    return f"{name} died: {detail}", EXIT_FAILED


def _ray_fields(text: str) -> list[tuple[str, str]]:
    # RayActorError's text: "\tclass_name: PolicyWorker\n\tpid: 123\n..." then "Worker exit
    # detail: <why>", the sentence that says how the process ended.
    out = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep and key in ("class_name", "pid", "name") and value.strip():
            out.append((key, value.strip()))
    marker = "Worker exit detail:"
    if marker in text:
        detail = text.split(marker, 1)[1].strip().splitlines()[0].strip()
        out.append(("detail", detail.rstrip(".") or "died"))
    return out
