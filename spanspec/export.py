"""OpenTelemetry SDK providers: exporters, resource, who exports, and a shutdown that never hangs.

:func:`setup` turns :class:`~spanspec.settings.Settings` into a :class:`TelemetryHandle` holding a
tracer, meter and (optionally) logger provider built from the SDK's own parts:
``BatchSpanProcessor``, ``PeriodicExportingMetricReader``, ``BatchLogRecordProcessor`` and the
official exporters:

- ``otlp``: gRPC or ``http/protobuf``, chosen and addressed by the standard
  ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_|LOGS_]{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT,...}`` variables
  (the Python default protocol is ``grpc``);
- ``console``: one JSON object per line on stdout;
- ``file``: OTLP/JSON lines in ``traces.jsonl``, ``metrics.jsonl``, ``logs.jsonl`` under
  ``settings.file_dir`` (see :mod:`spanspec._file_exporter`).

Never hurting the caller:

- Spans are handed to a batch queue sized for bursts (``SPAN_QUEUE_SIZE``); a dead or silent
  collector only slows the export thread. Every span the queue could not take, every span in a
  failed export, and every span still unexported at shutdown is counted (:meth:`TelemetryHandle.stats`),
  a warning names the endpoint once, and the counts are logged at shutdown.
- :meth:`TelemetryHandle.shutdown` returns within its timeout whatever the collector does. Spans
  still open then are ended with ``spanspec.truncated=true`` and exported.
- SIGTERM (when asked) and interpreter exit flush first. A forked child drops its parent's queue
  and open spans (the SDK's batch processors already reset at fork).
- Span and trace ids come from ``os.urandom``, so ranks that seed ``random`` alike still differ.

This is the only spanspec module that imports the SDK, and only inside :func:`setup`.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import logging
import os
import signal
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace

from spanspec.settings import Settings, SettingsError

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

__all__ = [
    "LOG_QUEUE_SIZE",
    "SCHEDULE_DELAY_MS",
    "SPAN_BATCH_SIZE",
    "SPAN_QUEUE_SIZE",
    "TRUNCATED_ATTRIBUTE",
    "ExportStats",
    "PipelineStats",
    "TelemetryHandle",
    "base_resource_attributes",
    "otlp_endpoint",
    "otlp_protocol",
    "setup",
    "should_export",
]

_log = logging.getLogger("spanspec.export")

# Batch settings. The SDK default queue (2,048) loses spans to a fast producer even when the
# exporter returns at once: the export thread waits for the GIL (5 ms switch interval) while the
# producer fills the queue. 32,768 slots absorb a burst at well under 1 µs a span; memory stays
# bounded (a queued span is ~3 KB). The standard OTEL_BSP_* / OTEL_BLRP_* variables still win.
SPAN_QUEUE_SIZE = 32_768
SPAN_BATCH_SIZE = 1_024
SCHEDULE_DELAY_MS = 1_000
LOG_QUEUE_SIZE = 8_192
METRIC_INTERVAL_MS = 10_000
TRUNCATED_ATTRIBUTE = "spanspec.truncated"

_SIGNALS = ("traces", "metrics", "logs")
# Loggers through which the SDK reports each failed export; we let each message through once.
_SDK_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk._logs._internal.export",
)
# Log records from these never become OpenTelemetry logs (they would feed back into the export).
_NOT_EXPORTED_LOGGERS = ("opentelemetry", "spanspec.export", "grpc", "urllib3", "requests")


# -- who exports ------------------------------------------------------------------------------


def _local_rank(local_rank: int | None) -> int | None:
    if local_rank is not None:
        return local_rank
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        text = os.environ.get(var, "").strip()
        if text.isdigit():
            return int(text)
    return None


_node_claims: dict[str, int] = {}


def _claim_node(run_id: str | None) -> bool:
    """First process of this run on this host to take an exclusive lock wins (held until exit)."""
    key = hashlib.sha1(f"{run_id or 'no-run-id'}".encode()).hexdigest()[:16]
    if key in _node_claims:
        return True
    path = Path(tempfile.gettempdir()) / f"spanspec-export-{key}.lock"
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _node_claims[key] = fd
    return True


def _unit_hash(*parts: object) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def should_export(
    settings: Settings,
    rank: int,
    world_size: int = 1,
    *,
    local_rank: int | None = None,
    worker_group: str = "",
) -> bool:
    """Return whether the process of ``rank`` exports, by ``settings.export_strategy``:

    - ``single_rank``: only ``rank == export_rank``;
    - ``all_ranks``: every rank;
    - ``first_rank_per_node``: the process whose local rank is 0 (``local_rank``, else
      ``$LOCAL_RANK`` / ``$SLURM_LOCALID``; without either, the first process of the run on the
      host to take a lock file);
    - ``sampled``: ``export_rank`` plus a stable pseudo-random ``export_sample_rate`` share of
      the ranks (the same ranks for the same ``run_id``).

    Disabled settings, or no exporter at all, export nowhere.
    """
    if not settings.enabled or not settings.exporters:
        return False
    strategy = settings.export_strategy
    if strategy == "all_ranks":
        return True
    if strategy == "single_rank":
        return rank == settings.export_rank
    if strategy == "first_rank_per_node":
        local = _local_rank(local_rank)
        return local == 0 if local is not None else _claim_node(settings.run_id)
    if strategy == "sampled":
        if rank == settings.export_rank:
            return True
        return _unit_hash(settings.run_id, worker_group, rank) < settings.export_sample_rate
    raise SettingsError([f"export_strategy={strategy!r}: unknown strategy"])


# -- resource ---------------------------------------------------------------------------------

_SLURM_VARS = {
    "SLURM_JOB_ID": "slurm.job.id",
    "SLURM_ARRAY_JOB_ID": "slurm.array_job.id",
    "SLURM_ARRAY_TASK_ID": "slurm.array_task.id",
    "SLURM_JOB_NAME": "slurm.job.name",
    "SLURM_PROCID": "slurm.proc.id",
    "SLURM_NODEID": "slurm.node.id",
    "SLURM_LOCALID": "slurm.local.id",
    "SLURMD_NODENAME": "slurm.node.name",
}
_K8S_VARS = {
    "k8s.pod.name": ("K8S_POD_NAME", "POD_NAME"),
    "k8s.pod.uid": ("K8S_POD_UID", "POD_UID"),
    "k8s.namespace.name": ("K8S_NAMESPACE", "POD_NAMESPACE"),
    "k8s.node.name": ("K8S_NODE_NAME", "NODE_NAME"),
}
_K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def base_resource_attributes(
    settings: Settings, env: Mapping[str, str] | None = None
) -> dict[str, str | int]:
    """Return ``service.name``, ``host.name``, ``process.pid`` and the SLURM / Kubernetes ids present.

    Kubernetes ids are read from the usual downward-API variables (``POD_NAME``, ``POD_NAMESPACE``,
    ``NODE_NAME``, ``POD_UID``, or their ``K8S_`` forms) when ``KUBERNETES_SERVICE_HOST`` is set.
    """
    env = os.environ if env is None else env
    attrs: dict[str, str | int] = {
        "service.name": settings.service_name,
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
    }
    for var, key in _SLURM_VARS.items():
        if env.get(var, "").strip():
            attrs[key] = env[var].strip()
    if env.get("KUBERNETES_SERVICE_HOST"):
        for key, names in _K8S_VARS.items():
            value = next((env[n].strip() for n in names if env.get(n, "").strip()), None)
            if value:
                attrs[key] = value
        if "k8s.pod.name" not in attrs and env.get("HOSTNAME"):
            attrs["k8s.pod.name"] = env["HOSTNAME"]
        if "k8s.namespace.name" not in attrs and os.path.exists(_K8S_NAMESPACE_FILE):
            try:
                attrs["k8s.namespace.name"] = Path(_K8S_NAMESPACE_FILE).read_text().strip()
            except OSError:
                pass
    return attrs


# -- OTLP addressing, from the standard variables --------------------------------------------


def otlp_protocol(signal_name: str, env: Mapping[str, str] | None = None) -> str:
    """Return ``grpc`` or ``http/protobuf`` for ``signal_name`` (traces, metrics, logs).

    Raises:
        SettingsError: naming the variable when it holds anything else.
    """
    env = os.environ if env is None else env
    for var in (
        f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        value = env.get(var, "").strip()
        if value:
            if value.lower() not in ("grpc", "http/protobuf"):
                raise SettingsError(
                    [
                        f"{var}={value!r}: expected one of: grpc, http/protobuf"
                        + (" (http/json has no Python exporter)" if value == "http/json" else "")
                    ]
                )
            return value.lower()
    return "grpc"


def otlp_endpoint(signal_name: str, protocol: str, env: Mapping[str, str] | None = None) -> str:
    """Return the URL the official exporter will send ``signal_name`` to (for messages)."""
    env = os.environ if env is None else env
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if protocol == "grpc":
        return base or "http://localhost:4317"
    return f"{(base or 'http://localhost:4318').rstrip('/')}/v1/{signal_name}"


# -- accounting -------------------------------------------------------------------------------


@dataclass
class PipelineStats:
    """Counts for one signal through one exporter. ``dropped``: never handed to the exporter
    (queue full, or still queued at shutdown); ``unresolved``: in an export still running when
    shutdown gave up."""

    signal: str
    exporter: str
    destination: str
    ended: int = 0
    submitted: int = 0
    exported: int = 0
    failed: int = 0
    failed_exports: int = 0

    @property
    def dropped(self) -> int:
        return max(0, self.ended - self.submitted)

    @property
    def unresolved(self) -> int:
        return max(0, self.submitted - self.exported - self.failed)

    @property
    def lost(self) -> int:
        return self.dropped + self.failed + self.unresolved


@dataclass
class ExportStats:
    """What the pipelines did: one :class:`PipelineStats` per signal and exporter, and the spans
    ended by shutdown (``truncated``). Metrics count exports (data points are aggregated)."""

    pipelines: list[PipelineStats] = field(default_factory=list)
    truncated: int = 0
    shutdown_s: float | None = None
    shutdown_timed_out: bool = False

    def _sum(self, signal_name: str, attr: str) -> int:
        return sum(getattr(p, attr) for p in self.pipelines if p.signal == signal_name)

    @property
    def spans_ended(self) -> int:
        """Spans that reached the export queue(s), counted once per exporter."""
        return self._sum("traces", "ended")

    @property
    def spans_exported(self) -> int:
        return self._sum("traces", "exported")

    @property
    def spans_dropped(self) -> int:
        return self._sum("traces", "dropped")

    @property
    def spans_lost(self) -> int:
        """Spans dropped, in failed exports, or in exports still running at shutdown."""
        return self._sum("traces", "lost")

    def summary(self) -> str:
        """Return one line per pipeline: what was exported, dropped, failed and left unresolved."""
        lines = []
        for p in self.pipelines:
            unit = {"traces": "spans", "metrics": "exports", "logs": "log records"}[p.signal]
            lines.append(
                f"{p.signal} -> {p.exporter} {p.destination}: {p.exported} {unit} exported, "
                f"{p.dropped} dropped (queue full or unsent at shutdown), {p.failed} in "
                f"{p.failed_exports} failed exports, {p.unresolved} unresolved"
            )
        if self.truncated:
            lines.append(f"{self.truncated} spans open at shutdown were ended as truncated")
        return "\n".join(lines)


class _OncePerMessage(logging.Filter):
    """Lets each (logger, message template) of the SDK's export logging through once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        if key in self.seen:
            self.suppressed += 1
            return False
        self.seen.add(key)
        return True


class _NotTelemetry(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(_NOT_EXPORTED_LOGGERS)


# -- the handle -------------------------------------------------------------------------------


class TelemetryHandle:
    """The providers of one process, and the means to flush and shut them down.

    ``tracer_provider`` / ``meter_provider`` are SDK providers when ``is_exporting``, otherwise
    the API's no-op providers. ``logger_provider`` is None unless logs are exported.
    """

    def __init__(
        self,
        settings: Settings,
        rank: int = 0,
        world_size: int = 1,
        *,
        is_exporting: bool = False,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        logger_provider: Any = None,
        resource: Resource | None = None,
        reason: str = "",
    ) -> None:
        self.settings = settings
        self.rank = rank
        self.world_size = world_size
        self.is_exporting = is_exporting
        self.reason = reason
        self.resource = resource
        self.tracer_provider: otel_trace.TracerProvider = (
            tracer_provider if tracer_provider is not None else otel_trace.NoOpTracerProvider()
        )
        self.meter_provider: otel_metrics.MeterProvider = (
            meter_provider if meter_provider is not None else otel_metrics.NoOpMeterProvider()
        )
        self.logger_provider = logger_provider
        self.pipelines: list[PipelineStats] = []
        self._open_spans: Any = None
        self._exporters: list[Any] = []
        self._guards: list[Any] = []
        self._log_handler: logging.Handler | None = None
        self._filters: list[tuple[logging.Logger, logging.Filter]] = []
        self._lock = threading.Lock()
        self._final: ExportStats | None = None
        self._shutdown_owner: int | None = None
        self._done = threading.Event()
        self._sigterm_previous: Any = None
        self._atexit: Any = None

    def __repr__(self) -> str:
        state = "exporting" if self.is_exporting else f"not exporting ({self.reason})"
        return (
            f"<TelemetryHandle rank={self.rank}/{self.world_size} {state} {self.settings.exporter}>"
        )

    @property
    def is_shut_down(self) -> bool:
        return self._final is not None

    def stats(self) -> ExportStats:
        """Return a snapshot of the counts (the final ones after :meth:`shutdown`)."""
        if self._final is not None:
            return self._final
        truncated = self._open_spans.truncated if self._open_spans is not None else 0
        return ExportStats([_copy(p) for p in self.pipelines], truncated)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now, waiting at most ``timeout_s``.

        Returns:
            True when every provider flushed in time; never raises.
        """
        if not self.is_exporting or self.is_shut_down:
            return True
        providers = [
            p for p in (self.tracer_provider, self.meter_provider, self.logger_provider) if p
        ]
        return _run_bounded(
            [(lambda p=p: p.force_flush()) for p in providers if hasattr(p, "force_flush")],
            timeout_s,
        )

    def shutdown(self, timeout_s: float | None = None) -> ExportStats:
        """End open spans (marked truncated), flush and close every provider within ``timeout_s``.

        ``timeout_s`` defaults to ``settings.shutdown_timeout_s``. Idempotent: later calls return
        the first call's stats. Logs one line per pipeline that lost anything. Never raises.

        Returns:
            The final :class:`ExportStats`.
        """
        if self._final is not None:
            return self._final
        timeout = self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        with self._lock:  # held for an instant only: a signal handler may interrupt the holder
            owner = self._shutdown_owner
            if owner is None:
                self._shutdown_owner = threading.get_ident()
        if owner is not None:
            # Someone is already shutting down: another thread (wait for it), or this very
            # thread, interrupted by SIGTERM mid-shutdown (waiting would deadlock).
            if owner != threading.get_ident():
                self._done.wait(timeout)
            return self._final if self._final is not None else self.stats()
        start = time.monotonic()
        timed_out = False
        truncated = 0
        try:
            if self.is_exporting:
                if self._open_spans is not None:
                    truncated = self._open_spans.end_all()
                tasks = [
                    lambda p=p: p.shutdown()
                    for p in (self.tracer_provider, self.meter_provider, self.logger_provider)
                    if p is not None and hasattr(p, "shutdown")
                ]
                # Keep a little of the budget to unblock exports still running.
                timed_out = not _run_bounded(tasks, max(0.0, timeout - 0.1))
                if timed_out:
                    _abort_exporters(self._exporters)
        except Exception:  # never into the caller
            _log.exception("telemetry shutdown failed")
        finally:
            self._detach()
        final = ExportStats(
            [_copy(p) for p in self.pipelines],
            truncated,
            shutdown_s=time.monotonic() - start,
            shutdown_timed_out=timed_out,
        )
        self._final = final
        self._done.set()
        self._report(final)
        return final

    def _report(self, final: ExportStats) -> None:
        if not self.is_exporting:
            return
        lossy = [p for p in final.pipelines if p.lost]
        for p in lossy:
            _log.warning(
                "telemetry: %s to %s %s lost %d of %d (%d dropped, %d in failed exports, "
                "%d unresolved at shutdown)",
                p.signal,
                p.exporter,
                p.destination,
                p.lost,
                p.ended if p.signal != "metrics" else p.submitted,
                p.dropped,
                p.failed,
                p.unresolved,
            )
        if final.shutdown_timed_out:
            _log.warning(
                "telemetry: shutdown gave up after %.1f s; the collector did not answer in time",
                final.shutdown_s,
            )
        if not lossy:
            _log.info("telemetry: shut down in %.2f s, nothing lost", final.shutdown_s)

    def _detach(self) -> None:
        for guard in self._guards:
            guard.closed = True
        for logger, flt in self._filters:
            logger.removeFilter(flt)
        self._filters.clear()
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler = None
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        if (
            self._sigterm_previous is not None
            and threading.current_thread() is threading.main_thread()
        ):
            try:
                if signal.getsignal(signal.SIGTERM) is self._sigterm_handler:
                    signal.signal(signal.SIGTERM, self._sigterm_previous)
            except (ValueError, OSError):
                pass

    # -- signals and exit --

    def install_sigterm_flush(self) -> bool:
        """Flush on SIGTERM, then hand the signal to the previous handler (or die by it).

        Only possible in the main thread. Returns:
            True when installed.
        """
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._sigterm_handler)
        except (ValueError, OSError):
            return False
        self._sigterm_previous = previous if previous is not None else signal.SIG_DFL
        return True

    def _sigterm_handler(self, signum: int, frame: Any) -> None:
        previous = self._sigterm_previous
        self.shutdown()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def _register_atexit(self) -> None:
        ref = weakref.ref(self)

        def at_exit() -> None:
            handle = ref()
            if handle is not None:
                handle.shutdown()

        self._atexit = at_exit
        atexit.register(at_exit)


def _zero_after_fork(ref: weakref.ref[TelemetryHandle]) -> None:
    """In a forked child, count from zero: the SDK dropped the parent's queue, nothing was lost."""
    handle = ref()
    for stats in handle.pipelines if handle is not None else ():
        stats.ended = stats.submitted = stats.exported = stats.failed = stats.failed_exports = 0


def _copy(p: PipelineStats) -> PipelineStats:
    return PipelineStats(**{k: getattr(p, k) for k in p.__dataclass_fields__})


def _run_bounded(tasks: list[Any], timeout_s: float) -> bool:
    """Run ``tasks`` in daemon threads at once; True if all finished within ``timeout_s``."""
    threads = [
        threading.Thread(target=_quietly, args=(t,), name="spanspec-shutdown", daemon=True)
        for t in tasks
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _quietly(task: Any) -> None:
    try:
        task()
    except Exception:
        _log.debug("telemetry: flush step failed", exc_info=True)


def _abort_exporters(exporters: list[Any]) -> None:
    """Shut the real exporters down from aside: closes gRPC channels, stops retry back-offs."""
    for exporter in exporters:
        threading.Thread(
            target=_quietly, args=(exporter.shutdown,), name="spanspec-abort", daemon=True
        ).start()


# -- setup ------------------------------------------------------------------------------------


def setup(
    settings: Settings,
    rank: int = 0,
    world_size: int = 1,
    resource: Mapping[str, Any] | None = None,
    *,
    local_rank: int | None = None,
    worker_group: str = "",
    exporting: bool | None = None,
    handle_sigterm: bool = False,
    register_atexit: bool = True,
) -> TelemetryHandle:
    """Build this process's providers from ``settings``.

    ``resource`` adds attributes to :func:`base_resource_attributes` (and to
    ``$OTEL_RESOURCE_ATTRIBUTES``, which the SDK reads; explicit attributes win). Whether this
    process exports follows :func:`should_export` unless ``exporting`` says so. When it does not,
    the handle holds no-op providers and nothing of the SDK is imported. ``handle_sigterm``
    installs :meth:`TelemetryHandle.install_sigterm_flush`; ``register_atexit`` flushes at exit.

    Returns:
        The :class:`TelemetryHandle`; call its ``shutdown()`` at the end.

    Raises:
        SettingsError: for an unusable OTLP protocol, or an exporter the SDK refuses to build
            (a configuration error, reported before any work starts).
    """
    decided = should_export(
        settings, rank, world_size, local_rank=local_rank, worker_group=worker_group
    )
    if exporting is None:
        exporting = decided
    exporting = exporting and settings.enabled and bool(settings.exporters)
    signals_on = settings.traces_enabled or settings.metrics_enabled or settings.logs_enabled
    if not exporting or not signals_on:
        reason = (
            "telemetry disabled"
            if not settings.enabled
            else "no exporter"
            if not settings.exporters
            else "no signal enabled"
            if not signals_on
            else f"{settings.export_strategy} does not pick rank {rank}"
        )
        return TelemetryHandle(settings, rank, world_size, is_exporting=False, reason=reason)
    handle = _build(settings, rank, world_size, dict(resource or {}))
    if register_atexit:
        handle._register_atexit()
    if handle_sigterm:
        handle.install_sigterm_flush()
    return handle


def _build(
    settings: Settings, rank: int, world_size: int, extra: dict[str, Any]
) -> TelemetryHandle:
    from opentelemetry.sdk.resources import Resource

    from spanspec import _pipeline

    resource = Resource.create({**base_resource_attributes(settings), **extra})
    protocols = {}
    if "otlp" in settings.exporters:
        protocols = {s: otlp_protocol(s) for s in _SIGNALS}
    handle = TelemetryHandle(settings, rank, world_size, is_exporting=True, resource=resource)
    destinations = {
        "file": lambda s: str(Path(settings.file_dir).expanduser().resolve() / f"{s}.jsonl"),
        "console": lambda s: "stdout",
        "otlp": lambda s: f"{protocols[s]} {otlp_endpoint(s, protocols[s])}",
    }

    def pipeline(signal_name: str, name: str) -> PipelineStats:
        stats = PipelineStats(signal_name, name, destinations[name](signal_name))
        handle.pipelines.append(stats)
        return stats

    try:
        built = _pipeline.build(settings, resource, protocols, pipeline)
    except SettingsError:
        raise
    except Exception as exc:
        raise SettingsError([f"exporter={settings.exporter!r}: cannot be built: {exc}"]) from exc
    handle.tracer_provider = built.tracer_provider
    handle.meter_provider = built.meter_provider or otel_metrics.NoOpMeterProvider()
    handle.logger_provider = built.logger_provider
    handle._open_spans = built.open_spans
    handle._exporters = built.exporters
    handle._guards = built.guards
    ref = weakref.ref(handle)
    os.register_at_fork(after_in_child=lambda: _zero_after_fork(ref))

    for name in _SDK_EXPORT_LOGGERS:
        logger, flt = logging.getLogger(name), _OncePerMessage()
        logger.addFilter(flt)
        handle._filters.append((logger, flt))
    if built.logger_provider is not None:
        handler = built.logging_handler
        handler.addFilter(_NotTelemetry())
        logging.getLogger().addHandler(handler)
        handle._log_handler = handler
    return handle
