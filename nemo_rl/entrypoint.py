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
``spanspec.truncated``; the workers are flushed (all at once, within the same bound and a second:
a stopped or stuck worker is killed, not waited for), Ray is shut down (no process left) and the
exit code is 143 (128 + SIGTERM). SIGHUP (the terminal or ssh session closed) and SIGINT
(Ctrl-C) to the driver end it the same way, with one line and exit codes 129 and 130.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from nemo_rl.algorithms.common import RunResult, cluster_address_problem
from nemo_rl.algorithms.task import run_inputs
from nemo_rl.distributed import WorkerDied
from nemo_rl.distributed.worker_group import stop_promptly
from nemo_rl.telemetry import (
    RunIdentity,
    check_telemetry,
    init_telemetry_driver,
    job_cost,
    shutdown_telemetry,
    stragglers,
)
from nemo_rl.telemetry.breakdown import SummaryFold, steps_done_lines
from nemo_rl.telemetry.config import STRAGGLER_THRESHOLD
from nemo_rl.utils import logger_backends
from nemo_rl.utils.config import ConfigError, load_config
from nemo_rl.utils.logger_backends import BackendError
from spanspec.export import ExportStats, planned_destinations
from spanspec.findings import SpecError
from spanspec.settings import SettingsError

if TYPE_CHECKING:
    from spanspec.spec import Spec

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_TERMINATED", "Loop", "run_loop"]

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
# The signals that end a run cleanly, and how its one line says so.
_STOPS = {
    signal.SIGTERM: "terminated by SIGTERM",
    signal.SIGHUP: "terminated by SIGHUP (the terminal or session was closed)",
    signal.SIGINT: "interrupted by SIGINT (Ctrl-C)",
}


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
    report: Callable[[Spec], SummaryFold] | None = None
    """Optional extra section printed after the breakdown: makes, from the registry, the fold
    that :func:`~nemo_rl.telemetry.breakdown.run_summary` feeds in its one pass over the traces."""


def run_loop(loop: Loop, argv: Sequence[str] | None = None, doc: str | None = None) -> int:
    """Runs ``loop`` from the command line ``argv``; returns the process exit code."""
    code = _run_loop(loop, argv, doc)
    # The logger backends' runs end with the job: finished, killed by SIGTERM, or failed.
    logger_backends.finish({0: "FINISHED", EXIT_TERMINATED: "KILLED"}.get(code, "FAILED"))
    return code


def _run_loop(loop: Loop, argv: Sequence[str] | None, doc: str | None) -> int:
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=loop.default_config, help="YAML run config")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides, loop.config)
        inputs = run_inputs(cfg)  # the model and the data, for the job span and the resource
        identity = RunIdentity(
            algorithm=loop.name,
            model=inputs.model,
            run_dir=cfg.logger.log_dir,
            max_steps=getattr(cfg, loop.name).max_steps,
            inputs=inputs.attributes(),
        )
        if problem := cluster_address_problem(cfg.cluster):  # before anything starts
            raise ConfigError([problem])
        check_telemetry(cfg.telemetry, identity)  # a bad setting fails before a backend opens a run
        # The logger backends next: an MLflow or W&B run's id goes on the telemetry resource.
        params = logger_backends.flatten(cfg.model_dump(mode="json"))
        backends = logger_backends.start(cfg.logger, params)
        # Telemetry before Ray: it writes NEMO_RL_OTEL_* for the Ray workers.
        handle = init_telemetry_driver(cfg.telemetry, identity, resource=backends.resource)
    except (ConfigError, SettingsError, SpecError, ValidationError, BackendError) as e:
        return _fail(str(e), EXIT_BAD_INPUT)
    except OSError as e:
        return _fail(f"telemetry: cannot write {e.filename or ''}: {e.strerror or e}", 2)

    settings = handle.settings
    print(f"telemetry: {handle.destinations()}", flush=True)  # where each signal goes
    if settings.enabled:  # which run this is, and what it records: before the first step
        print(
            f"run {settings.run_id}: span groups {settings.span_groups}, export "
            f"{settings.export_strategy} (every setting and its source: python -m "
            f"nemo_rl.telemetry settings {_shown(args.config, args.overrides)})",
            flush=True,
        )
    print(inputs.line(), flush=True)
    trace_file = os.path.join(settings.file_dir, "traces.jsonl")
    tags = {"rl.run_id": settings.run_id or ""}
    if any(d.startswith("file ") for d in planned_destinations(settings)["traces"]):
        tags["rl.trace_file"] = trace_file  # where the traces are kept, if in a file
    backends.set_tags(tags)
    threshold = settings.extra.get("straggler_threshold", STRAGGLER_THRESHOLD.default)
    stragglers.configure(threshold)
    steps_done = functools.partial(_steps_done, loop, cfg, settings, threshold)
    terminate = _Terminate(settings.shutdown_timeout_s)
    try:
        with terminate:
            result = loop.run(cfg, identity.job_attributes(settings))
    except ConfigError as e:  # found only once data or a checkpoint was read
        return _fail(str(e), EXIT_BAD_INPUT, shutdown=True)
    except _worker_errors() as e:
        if terminate.received:  # the teardown after a stop signal found a worker already gone
            return _stopped(terminate, settings, steps_done)
        message, code = _worker_failure(e)
        return _fail(message, code, shutdown=True)
    except WorkerDied as e:  # the loop found a worker dead or silent and said which
        return _fail(str(e), EXIT_TERMINATED if e.terminated else EXIT_FAILED, shutdown=True)
    except (KeyboardInterrupt, SystemExit):
        # A stop signal reaches a blocked ray.get as KeyboardInterrupt or SystemExit, whichever
        # Ray makes of it; only the flag says it was ours.
        if not terminate.received:
            _shutdown()
            raise
        return _stopped(terminate, settings, steps_done)
    stats = _shutdown()

    for line in result.summary.lines():
        print(line)
    if settings.enabled:
        print(job_cost(stats, result.worker_costs).line())
    print(f"metrics: {os.path.join(cfg.logger.log_dir, 'metrics.jsonl')}")
    for line in backends.where():
        print(line)
    if any(result.summary.curves.values()):  # a finished run run again trains nothing
        steps_done()
    return 0


class _Terminate:
    """While entered, SIGTERM, SIGHUP and SIGINT flush the driver's telemetry (ending open spans
    as truncated) and unwind the run with KeyboardInterrupt, so its teardown still stops the
    workers; :attr:`code` is then 128 + the signal.

    ``ray.init`` installs its own SIGTERM handler; :func:`nemo_rl.distributed.init_ray` puts
    back the ones it found, which are these. Another stop signal during the teardown is ignored.
    The teardown then waits for the workers' own flush within ``flush_s`` (the shutdown bound) and
    a second, not :data:`~nemo_rl.distributed.worker_group.CLOSE_TIMEOUT_S`: a stopped or stuck
    worker is killed instead of holding the exit.
    """

    def __init__(self, flush_s: float = 5.0) -> None:
        self.flush_s = flush_s
        self.received = 0  # the signal that stopped the run, or 0
        self.stats: ExportStats | None = None  # the driver's telemetry, flushed at the signal
        self._previous: dict[int, Any] = {}

    @property
    def message(self) -> str:
        return _STOPS.get(self.received, f"terminated by signal {self.received}")

    @property
    def code(self) -> int:
        return 128 + self.received

    def __enter__(self) -> _Terminate:
        if threading.current_thread() is threading.main_thread():
            for sig in _STOPS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received:
            return
        self.received = signum
        stop_promptly(self.flush_s + 1.0)  # the workers flush as the driver did, then are killed
        # bounded; open spans, the job span too, end as truncated; its stats make the cost line
        self.stats = shutdown_telemetry()
        raise KeyboardInterrupt(signal.Signals(signum).name)


def _shown(config: str, overrides: Sequence[str]) -> str:
    """The config and overrides as a command line, the config relative to here when inside."""
    path = os.path.relpath(config) if not os.path.relpath(config).startswith("..") else config
    return shlex.join([path, *overrides])


def _shutdown() -> ExportStats | None:
    import ray

    ray.shutdown()
    return shutdown_telemetry()


def _steps_done(loop: Loop, cfg: Any, settings: Any, threshold: float) -> None:
    """Where the step time of the steps that finished went, and where their traces are."""
    peak = cfg.cluster.peak_flops_per_worker if hasattr(cfg, "cluster") else None
    reports = [loop.report] if loop.report is not None else []
    for line in steps_done_lines(settings, cfg.logger.log_dir, threshold, peak, reports):
        print(line)


def _stopped(terminate: _Terminate, settings: Any, steps_done: Callable[[], None]) -> int:
    """A run ended by a stop signal: its traces were flushed at the signal, so the steps that
    finished are still reported (breakdown, the driver's telemetry cost, the report hint) before
    the one error line."""
    stats = _shutdown() or terminate.stats
    try:
        if settings.enabled and stats is not None:
            print(job_cost(stats).line() + " (the driver's; the workers were stopped)")
        steps_done()
    except Exception as e:  # a half-written last line, a full disk: the exit code still holds
        print(f"(no step summary: {type(e).__name__}: {e})", file=sys.stderr)
    print(f"error: {terminate.message}", file=sys.stderr)
    return terminate.code


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
    from ray.exceptions import RayActorError, RayTaskError

    # A call whose argument came from an actor that died is a RayTaskError of that death: no
    # function of its own failed, so it is named as the death below.
    if isinstance(e, RayTaskError) and not isinstance(e.cause, RayActorError):
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
