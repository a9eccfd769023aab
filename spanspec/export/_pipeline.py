"""SDK assembly for :mod:`spanspec.export`: id generator, processors, guarded exporters.

Imported by :func:`spanspec.export.setup` only, when telemetry is on; everything here is built
from the SDK's own classes, with counting and warn-once wrapped around them.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator

from spanspec import metrics as spanspec_metrics
from spanspec.export._console import CONSOLE_FILE
from spanspec.export._file_exporter import FileLogExporter, FileMetricExporter, FileSpanExporter
from spanspec.export._guards import (
    Guard,
    GuardedLogExporter,
    GuardedMetricExporter,
    GuardedSpanExporter,
)
from spanspec.export._stats import (
    LOG_QUEUE_SIZE,
    METRIC_INTERVAL_MS,
    SCHEDULE_DELAY_MS,
    SPAN_BATCH_SIZE,
    SPAN_QUEUE_SIZE,
    ExportCpu,
    PipelineStats,
    exporters_for,
)
from spanspec.files import not_regular_output
from spanspec.settings import Settings, SettingsError
from spanspec.spec import TRUNCATED_ATTRIBUTE
from spanspec.watchdog import OpenSpan

_log = logging.getLogger("spanspec.export")


class UrandomIdGenerator(IdGenerator):
    """Trace and span ids from ``os.urandom``: distinct across processes whatever ``random`` is
    seeded with, and across a fork."""

    def generate_span_id(self) -> int:
        while True:
            value = int.from_bytes(os.urandom(8), "big")
            if value:
                return value

    def generate_trace_id(self) -> int:
        while True:
            value = int.from_bytes(os.urandom(16), "big")
            if value:
                return value

    def is_trace_id_random(self) -> bool:
        return True


class OpenSpans(SpanProcessor):
    """Tracks the spans started and not yet ended, so shutdown can end them; feeds span-duration
    histograms through :func:`spanspec.metrics.span_ended`. Forgets its parent's spans at fork."""

    def __init__(self) -> None:
        self._open: dict[int, Span] = {}
        self.truncated = 0
        self.ended = 0  # spans ended in this process, exported or not
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget(ref))

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self._open[span.context.span_id] = span

    def on_end(self, span: ReadableSpan) -> None:
        self._open.pop(span.context.span_id, None)
        self.ended += 1
        if not (span.attributes and span.attributes.get(TRUNCATED_ATTRIBUTE)):
            # A span cut short by shutdown is not a finished phase: no duration, no count.
            spanspec_metrics.span_ended(span.name, span.start_time, span.end_time, span.attributes)

    def snapshot(self) -> list[OpenSpan]:
        """The spans open now, for the stall watchdog's warning."""
        now = time.time_ns()
        out = []
        for span in list(self._open.values()):
            parent = span.parent.span_id if span.parent is not None else None
            out.append(
                OpenSpan(span.name, span.context.span_id, parent, (now - span.start_time) / 1e9)
            )
        return out

    def end_all(self) -> int:
        """End every open span with ``spanspec.truncated=true``; return how many."""
        ended = 0
        for span in list(self._open.values()):
            try:
                span.set_attribute(TRUNCATED_ATTRIBUTE, True)
                span.end()
                ended += 1
            except Exception:
                _log.debug("could not end an open span", exc_info=True)
        self._open.clear()
        self.truncated += ended
        return ended


def _forget(ref: weakref.ref[OpenSpans]) -> None:
    tracker = ref()
    if tracker is not None:
        tracker._open.clear()
        tracker.ended = 0


def _queue_warner(stats: PipelineStats, capacity: int, batch: int) -> Callable[[], None]:
    """Return a check, cheap enough for every span, that warns once when spans start to drop."""
    threshold = capacity + batch  # a batch being handed over is briefly in neither count
    warned = False

    def check() -> None:
        nonlocal warned
        if not warned and stats.ended - stats.submitted > threshold:
            warned = True
            _log.warning(
                "telemetry: the %s queue (%d) is full, the exporter to %s does not keep up; "
                "%s are dropped and counted (reported at shutdown)",
                stats.signal,
                capacity,
                stats.destination,
                stats.signal,
            )

    return check


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's ``BatchSpanProcessor``, counting every span offered to it."""

    def __init__(self, exporter: GuardedSpanExporter, stats: PipelineStats, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._stats = stats
        capacity = kwargs.get("max_queue_size") or int(
            os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        )
        batch = kwargs.get("max_export_batch_size") or int(
            os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        )
        self._check = _queue_warner(stats, capacity, batch)

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        self._stats.ended += 1  # one increment under the GIL: no lock on the hot path
        super().on_end(span)
        self._check()


class CountingBatchLogRecordProcessor(BatchLogRecordProcessor):
    """The SDK's ``BatchLogRecordProcessor``, counting every record offered to it."""

    def __init__(self, exporter: GuardedLogExporter, stats: PipelineStats, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._stats = stats
        capacity = kwargs.get("max_queue_size") or int(
            os.environ.get("OTEL_BLRP_MAX_QUEUE_SIZE", 2048)
        )
        self._check = _queue_warner(stats, capacity, kwargs.get("max_export_batch_size") or 512)

    def on_emit(self, log_record: Any) -> None:
        self._stats.ended += 1
        super().on_emit(log_record)
        self._check()


# -- building -----------------------------------------------------------------------------------


def _env_or(var: str, value: Any) -> Any:
    """``None`` (let the SDK read the standard variable) when ``var`` is set, else ``value``."""
    return None if os.environ.get(var, "").strip() else value


def _otlp(signal_name: str, protocol: str) -> Any:
    if protocol == "grpc":
        if signal_name == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()
        if signal_name == "metrics":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

            return OTLPMetricExporter()
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        return OTLPLogExporter()
    if signal_name == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if signal_name == "metrics":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OTLPLogExporter()


def _exporter(
    name: str,
    signal_name: str,
    settings: Settings,
    protocols: dict[str, str],
    label_attributes: Sequence[str] = (),
) -> Any:
    if name == "prometheus":  # pushed: served /metrics is a reader, built apart
        from spanspec.export.prometheus import RemoteWriteExporter

        assert settings.prometheus_remote_write_url is not None
        return RemoteWriteExporter(settings.prometheus_remote_write_url, label_attributes)
    if name == "otlp":
        return _otlp(signal_name, protocols[signal_name])
    if name == "file":
        folder = Path(settings.file_dir).expanduser().resolve()
        problem = not_regular_output(folder / f"{signal_name}.jsonl")
        if problem:
            raise SettingsError([f"{settings.how_to_set('file_dir')}: {problem}"])
        return {"traces": FileSpanExporter, "metrics": FileMetricExporter, "logs": FileLogExporter}[
            signal_name
        ](folder)
    # console: the same OTLP/JSON lines, every signal and process in one file, which the process
    # owning the console copies to its stdout (spanspec.export._console).
    folder = Path(settings.file_dir).expanduser().resolve()
    problem = not_regular_output(folder / CONSOLE_FILE)
    if problem:
        raise SettingsError([f"{settings.how_to_set('file_dir')}: {problem}"])
    return {"traces": FileSpanExporter, "metrics": FileMetricExporter, "logs": FileLogExporter}[
        signal_name
    ](folder, CONSOLE_FILE)


@dataclass
class Built:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider | None
    logger_provider: LoggerProvider | None
    logging_handler: logging.Handler | None
    open_spans: OpenSpans
    exporters: list[Any] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    cpu: ExportCpu = field(default_factory=ExportCpu)
    prometheus: Any = None  # the /metrics server (spanspec.export.prometheus.PrometheusServer)


def build(
    settings: Settings,
    resource: Resource,
    protocols: dict[str, str],
    pipeline: Callable[[str, str], PipelineStats],
    label_attributes: Sequence[str] = (),
) -> Built:
    """Return the providers for ``settings``; ``pipeline(signal, exporter)`` makes each stats row;
    ``label_attributes`` are the resource attributes Prometheus series carry as labels."""
    built = Built(
        TracerProvider(
            resource=resource, id_generator=UrandomIdGenerator(), shutdown_on_exit=False
        ),
        None,
        None,
        None,
        OpenSpans(),
    )

    def guarded(signal_name: str, name: str, wrapper: Any) -> tuple[Any, PipelineStats]:
        exporter = _exporter(name, signal_name, settings, protocols, label_attributes)
        stats = pipeline(signal_name, name)
        wrapped = wrapper(exporter, stats)
        wrapped._guard.cpu = built.cpu
        built.exporters.append(exporter)
        built.guards.append(wrapped._guard)
        return wrapped, stats

    # Spans feed duration histograms even when traces themselves are not exported.
    built.tracer_provider.add_span_processor(built.open_spans)
    if settings.traces_enabled:
        for name in exporters_for("traces", settings):
            exporter, stats = guarded("traces", name, GuardedSpanExporter)
            built.tracer_provider.add_span_processor(
                CountingBatchSpanProcessor(
                    exporter,
                    stats,
                    max_queue_size=_env_or("OTEL_BSP_MAX_QUEUE_SIZE", SPAN_QUEUE_SIZE),
                    max_export_batch_size=_env_or(
                        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", SPAN_BATCH_SIZE
                    ),
                    schedule_delay_millis=_env_or("OTEL_BSP_SCHEDULE_DELAY", SCHEDULE_DELAY_MS),
                )
            )

    if settings.metrics_enabled:
        interval = _env_or("OTEL_METRIC_EXPORT_INTERVAL", METRIC_INTERVAL_MS)
        pull = "prometheus" in settings.exporters and not settings.prometheus_remote_write_url
        readers: list[Any] = [
            PeriodicExportingMetricReader(
                guarded("metrics", name, GuardedMetricExporter)[0], export_interval_millis=interval
            )
            for name in exporters_for("metrics", settings)
            if not (name == "prometheus" and pull)
        ]
        if pull:
            from spanspec.export import prometheus

            built.prometheus = prometheus.start(
                settings.prometheus_port,
                setting=settings.how_to_set("prometheus_port"),
                label_attributes=label_attributes,
            )
            readers.append(built.prometheus.reader)
            pipeline("metrics", "prometheus").destination = built.prometheus.url
        built.meter_provider = MeterProvider(
            metric_readers=readers, resource=resource, shutdown_on_exit=False
        )

    if settings.logs_enabled:
        built.logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        for name in exporters_for("logs", settings):
            exporter, stats = guarded("logs", name, GuardedLogExporter)
            built.logger_provider.add_log_record_processor(
                CountingBatchLogRecordProcessor(
                    exporter,
                    stats,
                    max_queue_size=_env_or("OTEL_BLRP_MAX_QUEUE_SIZE", LOG_QUEUE_SIZE),
                    schedule_delay_millis=_env_or("OTEL_BLRP_SCHEDULE_DELAY", SCHEDULE_DELAY_MS),
                )
            )
        with warnings.catch_warnings():  # deprecated in favour of a package we do not depend on
            warnings.simplefilter("ignore", DeprecationWarning)
            built.logging_handler = LoggingHandler(logger_provider=built.logger_provider)
    return built
