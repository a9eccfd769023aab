"""Export constants, drop accounting and log filters: the leaf the rest of :mod:`spanspec.export` imports.

Factored out so that the SDK assembly (:mod:`spanspec.export._pipeline`) and the handle can share
them without importing each other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

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
    points_submitted: int = 0  # metrics: data points handed to the exporter
    points_exported: int = 0
    refused: str = ""  # why the backend refused this signal ("HTTP 405"); then it is switched off
    not_sent: int = 0  # items not sent once the signal was switched off (not lost: refused)
    repaired: int = 0  # spans exported with text repaired (a name not text, lone surrogates)
    attributes_dropped: int = 0  # span and event attributes dropped by OpenTelemetry's limits

    @property
    def dropped(self) -> int:
        return max(0, self.ended - self.submitted - self.not_sent)

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
    spans_produced: int = 0  # spans ended in this process (exported or not)
    export_cpu_s: float = 0.0  # CPU time of the export threads (and of exports run elsewhere)
    process_cpu_s: float = 0.0  # CPU time of the whole process, when the stats were taken

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

    def cost(self) -> TelemetryCost:
        """This process's own telemetry cost, as plain numbers (picklable, addable)."""
        points = self._sum("metrics", "points_submitted")
        exported = self._sum("metrics", "points_exported")
        return TelemetryCost(
            processes=1,
            spans=self.spans_produced,
            spans_exported=self.spans_exported,
            spans_dropped=self.spans_lost,
            points=points,
            points_exported=exported,
            points_dropped=points - exported,
            export_cpu_s=self.export_cpu_s,
            process_cpu_s=self.process_cpu_s,
        )

    def summary(self) -> str:
        """Return one line per pipeline: what was exported, dropped, failed and left unresolved."""
        lines = []
        for p in self.pipelines:
            unit = {"traces": "spans", "metrics": "exports", "logs": "log records"}[p.signal]
            lines.append(
                f"{p.signal} -> {p.exporter} {p.destination}: {p.exported} {unit} exported, "
                f"{p.dropped} dropped (queue full or unsent at shutdown), {p.failed} in "
                f"{p.failed_exports} failed exports, {p.unresolved} unresolved"
                + (
                    f"; refused by the backend ({p.refused}), {p.not_sent} not sent"
                    if p.refused
                    else ""
                )
                + (f"; {p.repaired} with text repaired (U+FFFD)" if p.repaired else "")
                + (
                    f"; {p.attributes_dropped} attributes dropped by OpenTelemetry limits"
                    if p.attributes_dropped
                    else ""
                )
            )
        if self.truncated:
            lines.append(f"{self.truncated} spans open at shutdown were ended as truncated")
        return "\n".join(lines)


@dataclass(frozen=True)
class TelemetryCost:
    """What telemetry cost one process (or, summed with ``+``, a whole job).

    ``spans``: ended in the process; ``spans_exported`` / ``spans_dropped``: counted by the
    pipelines (once per exporter; dropped includes failed exports and exports unresolved at
    shutdown). ``points``: metric data points handed to the exporters. ``export_cpu_s``: CPU
    time of the export threads; ``process_cpu_s``: CPU time of the process.
    """

    processes: int = 0
    spans: int = 0
    spans_exported: int = 0
    spans_dropped: int = 0
    points: int = 0
    points_exported: int = 0
    points_dropped: int = 0
    export_cpu_s: float = 0.0
    process_cpu_s: float = 0.0

    def __add__(self, other: TelemetryCost) -> TelemetryCost:
        return TelemetryCost(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def total(cls, costs: Iterable[TelemetryCost]) -> TelemetryCost:
        """The sum of ``costs`` (zero for none)."""
        out = cls()
        for cost in costs:
            out = out + cost
        return out

    @property
    def export_cpu_share(self) -> float:
        """Export CPU as a fraction of the processes' CPU time (0 when that is unknown)."""
        return self.export_cpu_s / self.process_cpu_s if self.process_cpu_s > 0 else 0.0

    def line(self) -> str:
        """One line: ``telemetry cost: 3 processes, 412 spans (412 exported, 0 dropped), ...``."""
        return (
            f"telemetry cost: {self.processes} processes, {self.spans} spans "
            f"({self.spans_exported} exported, {self.spans_dropped} dropped), {self.points} "
            f"metric points ({self.points_dropped} dropped), export CPU {self.export_cpu_s:.2f} s "
            f"= {100 * self.export_cpu_share:.2f}% of the run's {self.process_cpu_s:.1f} s CPU"
        )


class ExportCpu:
    """CPU time spent exporting: the SDK's export threads, read from their own CPU clocks
    (``time.pthread_getcpuclockid``, while they live, and after each export they run), plus
    the time of exports run by any other thread (a flush from the main thread, shutdown)."""

    def __init__(self) -> None:
        self._threads: dict[int, threading.Thread] = {}
        self._seen: dict[int, float] = {}
        self._elsewhere = 0.0

    def adopt(self, threads: Iterable[threading.Thread]) -> None:
        """Count these threads (started by the SDK for exporting) as export threads."""
        for thread in threads:
            if thread.ident is not None:
                self._threads[thread.ident] = thread

    def exported(self, started_cpu: float) -> None:
        """Called in the exporting thread after an export that began at ``time.thread_time()``
        ``started_cpu``."""
        now = time.thread_time()
        ident = threading.get_ident()
        if ident in self._threads:
            self._seen[ident] = now  # the whole thread's CPU so far: batching included
        else:
            self._elsewhere += now - started_cpu

    def measure(self) -> None:
        """Read the export threads' CPU clocks now (call before they end)."""
        for ident, thread in list(self._threads.items()):
            if not thread.is_alive():
                continue
            try:
                cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))
            except (OSError, AttributeError, OverflowError):
                continue
            self._seen[ident] = max(self._seen.get(ident, 0.0), cpu)

    def total(self) -> float:
        """Seconds of CPU spent exporting so far."""
        return sum(self._seen.values()) + self._elsewhere

    def reset(self) -> None:
        """Count from zero (a forked child)."""
        self._seen.clear()
        self._elsewhere = 0.0


def exporters_for(signal_name: str, settings: Any) -> list[str]:
    """The exporters of one signal: ``prometheus`` serves metrics only, and takes them from
    ``otlp`` (a Prometheus user scrapes metrics; OTLP then carries traces and logs)."""
    names = list(settings.exporters)
    partial = getattr(settings, "auto_otlp_signals", None)
    if partial is not None:  # exporter auto, some signals with an endpoint of their own
        return ["otlp"] if signal_name in partial else ["file"]
    if "prometheus" in names:
        names.remove("prometheus")
        if signal_name == "metrics":
            names = [n for n in names if n != "otlp"] + ["prometheus"]
    return names


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


class RefusalWatch(logging.Filter):
    """Sees the SDK's "Failed to export" records and remembers, per thread, whether the backend
    refused the signal outright (HTTP 404/405/415/501, gRPC UNIMPLEMENTED) rather than failing
    for a while: such a backend will never take it, so retrying and counting it lost misleads.
    Installed before :class:`_OncePerMessage`, so it sees every record."""

    HTTP_REFUSALS = frozenset({404, 405, 415, 501})

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Failed to export"):
            args = record.args if isinstance(record.args, tuple) else ()
            for value in args:
                if getattr(value, "name", None) == "UNIMPLEMENTED":
                    self._local.refused = "gRPC UNIMPLEMENTED"
                elif isinstance(value, int) and value in self.HTTP_REFUSALS:
                    self._local.refused = f"HTTP {value}"
        return True

    def take(self) -> str:
        """The refusal seen on this thread since the last call, or ``""``."""
        refused = getattr(self._local, "refused", "")
        self._local.refused = ""
        return refused


REFUSALS = RefusalWatch()


class _Scrub(logging.Filter):
    """Redacts URL credentials (userinfo, query string) in the SDK's export log lines: its
    messages name the endpoint, which may carry ``user:password@`` or ``?token=``."""

    def filter(self, record: logging.LogRecord) -> bool:
        from spanspec._redact import scrub, scrub_value

        if isinstance(record.msg, str):
            record.msg = scrub(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(scrub_value(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: scrub_value(v) for k, v in record.args.items()}
        return True


SCRUB = _Scrub()


class _NotTelemetry(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(_NOT_EXPORTED_LOGGERS)


def _copy(p: PipelineStats) -> PipelineStats:
    return PipelineStats(**{k: getattr(p, k) for k in p.__dataclass_fields__})
