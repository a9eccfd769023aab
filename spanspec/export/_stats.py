"""Export constants, drop accounting and log filters: the leaf the rest of :mod:`spanspec.export` imports.

Factored out so that the SDK assembly (:mod:`spanspec.export._pipeline`) and the handle can share
them without importing each other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

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


def _copy(p: PipelineStats) -> PipelineStats:
    return PipelineStats(**{k: getattr(p, k) for k in p.__dataclass_fields__})
