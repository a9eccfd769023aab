"""The one entry-point path every ``examples/run_<algo>.py`` shares.

    sys.exit(run_loop(Loop("sft", MasterConfig, run, DEFAULT_CONFIG), doc=__doc__))

It parses ``--config`` and dotted overrides, validates the whole config (before Ray or any
worker starts), starts the driver's telemetry, runs the loop inside its job span, shuts Ray and
telemetry down, and prints the run's summary, the job's telemetry cost (one line: spans, drops,
export CPU as a share of the run's CPU, driver and workers together) and where the step time went.

Every expected failure becomes one short message and an exit code, never a traceback: a bad
config or telemetry setting exits 2 (the message names the file, key or variable), a worker that
died exits 1 naming the worker. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from nemo_rl.algorithms.common import RunSummary
from nemo_rl.distributed import WorkerDied
from nemo_rl.telemetry import init_telemetry_driver, job_cost, shutdown_telemetry
from nemo_rl.telemetry.breakdown import step_breakdown
from nemo_rl.utils.config import ConfigError, load_config
from spanspec.export import ExportStats
from spanspec.findings import SpecError
from spanspec.settings import SettingsError

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "Loop", "run_loop"]

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


@dataclass(frozen=True)
class Loop:
    """One algorithm as the entry point sees it."""

    name: str
    """The algorithm (``grpo``, ``sft``, ...): the config section and ``rl.algorithm``."""
    config: type[BaseModel]
    """The run config model (``MasterConfig`` of the algorithm's module)."""
    run: Callable[[Any, dict[str, Any]], RunSummary]
    """``run(cfg, job_attributes)``: opens the loop's job span, sets up, trains, tears down."""
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
        # Telemetry first: it writes NEMO_RL_OTEL_* for the Ray workers, so it precedes ray.init.
        handle = init_telemetry_driver(cfg, loop.name)
    except (ConfigError, SettingsError, SpecError, ValidationError) as e:
        return _fail(str(e), EXIT_BAD_INPUT)
    except OSError as e:
        return _fail(f"telemetry: cannot write {e.filename or ''}: {e.strerror or e}", 2)

    settings = handle.settings
    section = getattr(cfg, loop.name)
    job_attrs: dict[str, Any] = {
        "rl.algorithm": loop.name,
        "rl.max_steps": section.max_steps,
        "rl.model": cfg.policy.model_name,
        "rl.run_id": settings.run_id or "",
    }
    if settings.user_id:  # opt-in and sensitive: the registry redacts its value
        job_attrs["enduser.id"] = settings.user_id
    try:
        summary = loop.run(cfg, job_attrs)
    except ConfigError as e:  # found only once data or a checkpoint was read
        return _fail(str(e), EXIT_BAD_INPUT, shutdown=True)
    except _worker_errors() as e:
        return _fail(_worker_failure(e), EXIT_FAILED, shutdown=True)
    except WorkerDied as e:  # the loop found a worker dead or silent and said which
        return _fail(str(e), EXIT_FAILED, shutdown=True)
    stats = _shutdown()

    for line in summary.lines():
        print(line)
    if settings.enabled:
        print(job_cost(stats).line())
    print(f"metrics: {os.path.join(cfg.logger.log_dir, 'metrics.jsonl')}")
    trace_file = os.path.join(settings.file_dir, "traces.jsonl")
    if settings.enabled and "file" in settings.exporters and os.path.exists(trace_file):
        print(step_breakdown(trace_file, run_id=settings.run_id))
        if loop.report is not None:
            print(loop.report(trace_file, settings.run_id))
        print(f"traces: {trace_file}  (view a step: spanspec view {trace_file})")
    return 0


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


def _worker_failure(e: BaseException) -> str:
    # Ray's message holds the worker's whole traceback; one line names the call and the cause.
    from ray.exceptions import RayTaskError

    if isinstance(e, RayTaskError):
        cause = e.cause if isinstance(e.cause, BaseException) else e
        first = (str(cause).strip().splitlines() or [""])[0]
        return (
            f"{e.function_name} failed in its worker (pid {e.pid}): {type(cause).__name__}: {first}"
        )
    first = (str(e).strip().splitlines() or [""])[0]
    return f"a worker process died ({type(e).__name__}): {first}"
