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

This package is the only part of spanspec (with :mod:`spanspec.testing`) that imports the SDK,
and only once :func:`setup` builds an exporting process: its ``_pipeline`` assembles the SDK parts.
Its modules: ``_stats`` (constants, drop accounting, log filters: the leaf), ``who`` (which
processes export), ``resource`` (resource detection), ``otlp`` (OTLP addressing), ``_handle``
(:class:`TelemetryHandle`), ``_pipeline`` (SDK assembly) and ``_file_exporter`` (OTLP/JSON files).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opentelemetry import metrics as otel_metrics

from spanspec.export._handle import TelemetryHandle, _zero_after_fork
from spanspec.export._stats import (
    _SDK_EXPORT_LOGGERS,
    _SIGNALS,
    LOG_QUEUE_SIZE,
    SCHEDULE_DELAY_MS,
    SPAN_BATCH_SIZE,
    SPAN_QUEUE_SIZE,
    TRUNCATED_ATTRIBUTE,
    ExportStats,
    PipelineStats,
    _NotTelemetry,
    _OncePerMessage,
)
from spanspec.export.otlp import otlp_endpoint, otlp_protocol
from spanspec.export.resource import base_resource_attributes
from spanspec.export.who import should_export
from spanspec.settings import Settings, SettingsError

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

    from spanspec.export import _pipeline

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
