"""OpenTelemetry SDK providers: exporters, resource, who exports, and a shutdown that never hangs.

:func:`setup` turns :class:`~spanspec.settings.Settings` into a :class:`TelemetryHandle` holding a
tracer, meter and (optionally) logger provider built from the SDK's own parts:
``BatchSpanProcessor``, ``PeriodicExportingMetricReader``, ``BatchLogRecordProcessor`` and the
official exporters:

- ``otlp``: gRPC or ``http/protobuf``, chosen and addressed by the standard
  ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_|LOGS_]{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT,...}`` variables
  (the Python default protocol is ``grpc``);
- ``console``: OTLP/JSON lines, one export request per line, on the stdout of the process that
  owns the console, which holds nothing else: every process appends its lines to
  ``<file_dir>/console.jsonl`` and the owner copies them to its stdout, whose other writers it
  sends to stderr (see :mod:`spanspec.export._console`);
- ``file``: OTLP/JSON lines in ``traces.jsonl``, ``metrics.jsonl``, ``logs.jsonl`` under
  ``settings.file_dir`` (see :mod:`spanspec._file_exporter`).

With the ``watchdog`` setting on, :func:`setup` switches on :mod:`spanspec.watchdog` (a span
outliving its ``max_duration`` is reported once); :meth:`TelemetryHandle.shutdown` switches it
off. :meth:`ExportStats.cost` is the process's own telemetry cost (spans, drops, export CPU).

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
(:class:`TelemetryHandle`), ``_pipeline`` (SDK assembly), ``_file_exporter`` (OTLP/JSON files)
and ``_console`` (the console exporter's one stream).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics as otel_metrics

from spanspec import watchdog
from spanspec._redact import redact_url, scrub
from spanspec.export._console import CONSOLE_FILE
from spanspec.export._handle import TelemetryHandle, _zero_after_fork
from spanspec.export._stats import (
    _SDK_EXPORT_LOGGERS,
    _SIGNALS,
    LOG_QUEUE_SIZE,
    REFUSALS,
    SCHEDULE_DELAY_MS,
    SCRUB,
    SPAN_BATCH_SIZE,
    SPAN_QUEUE_SIZE,
    ExportStats,
    PipelineStats,
    TelemetryCost,
    _NotTelemetry,
    _OncePerMessage,
    exporters_for,
)
from spanspec.export.otlp import (
    otlp_destination,
    otlp_endpoint,
    otlp_protocol,
    protocol_hint,
)
from spanspec.export.resource import base_resource_attributes
from spanspec.export.who import should_export
from spanspec.settings import Settings, SettingsError
from spanspec.spec import TRUNCATED_ATTRIBUTE

_log = logging.getLogger("spanspec.export")

__all__ = [
    "LOG_QUEUE_SIZE",
    "SCHEDULE_DELAY_MS",
    "SPAN_BATCH_SIZE",
    "SPAN_QUEUE_SIZE",
    "TRUNCATED_ATTRIBUTE",
    "ExportStats",
    "PipelineStats",
    "TelemetryCost",
    "TelemetryHandle",
    "base_resource_attributes",
    "otlp_endpoint",
    "otlp_protocol",
    "planned_destinations",
    "protocol_hint",
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
    node: str | None = None,
    exporting: bool | None = None,
    handle_sigterm: bool = False,
    register_atexit: bool = True,
    label_attributes: Sequence[str] = (),
    console_owner: bool = True,
) -> TelemetryHandle:
    """Build this process's providers from ``settings``.

    ``resource`` adds attributes to :func:`base_resource_attributes` (and to
    ``$OTEL_RESOURCE_ATTRIBUTES``, which the SDK reads; explicit attributes win). Whether this
    process exports follows :func:`should_export` (``node``: this process's node id, for
    ``first_rank_per_node`` where several nodes share a host) unless ``exporting`` says so. When
    it does not, the handle holds no-op providers and nothing of the SDK is imported.
    ``handle_sigterm`` installs :meth:`TelemetryHandle.install_sigterm_flush`;
    ``register_atexit`` flushes at exit. ``label_attributes`` names the resource attributes every
    Prometheus series carries as a label (a run id, a role, a rank: ``app.run_id`` becomes
    ``app_run_id``), so that runs and processes never share a series; OTLP and the files keep
    them on the resource. With the ``console`` exporter, ``console_owner`` says whether this
    process owns the console: its stdout then carries every process's console lines and nothing
    else (its other output goes to stderr); another process (a worker) only appends its lines.

    Returns:
        The :class:`TelemetryHandle`; call its ``shutdown()`` at the end.

    Raises:
        SettingsError: for an unusable OTLP protocol, or an exporter the SDK refuses to build
            (a configuration error, reported before any work starts).
    """
    decided = should_export(
        settings, rank, world_size, local_rank=local_rank, worker_group=worker_group, node=node
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
    handle = _build(settings, rank, world_size, dict(resource or {}), tuple(label_attributes))
    if console_owner and any(p.exporter == "console" for p in handle.pipelines):
        from spanspec.export._console import ConsolePump, take_stdout

        path = Path(settings.file_dir).expanduser().resolve() / CONSOLE_FILE
        handle._console_pump = ConsolePump(path, take_stdout())
    if settings.watchdog:
        labels = {"rank": rank, "group": worker_group} if worker_group else {"rank": rank}
        watchdog.enable(labels, open_spans=handle._open_spans.snapshot)
    if register_atexit:
        handle._register_atexit()
    if handle_sigterm:
        handle.install_sigterm_flush()
    return handle


def _build(
    settings: Settings,
    rank: int,
    world_size: int,
    extra: dict[str, Any],
    label_attributes: tuple[str, ...],
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
        "console": lambda s: str(Path(settings.file_dir).expanduser().resolve() / CONSOLE_FILE),
        "otlp": lambda s: otlp_destination(s, protocols[s]),
        "prometheus": lambda s: _prometheus_destination(settings),
    }
    if settings.prometheus_remote_write_url and "prometheus" in settings.exporters:
        _needs_cramjam(settings.how_to_set("prometheus_remote_write_url"))
    for signal_name, protocol in protocols.items():
        hint = protocol_hint(signal_name, protocol)
        if hint and _signal_on(settings, signal_name):
            _log.warning("telemetry: %s", hint)

    def pipeline(signal_name: str, name: str) -> PipelineStats:
        stats = PipelineStats(signal_name, name, destinations[name](signal_name))
        handle.pipelines.append(stats)
        return stats

    before = set(threading.enumerate())
    try:
        built = _pipeline.build(settings, resource, protocols, pipeline, label_attributes)
    except SettingsError:
        raise
    except Exception as exc:
        raise SettingsError(
            [f"exporter={settings.exporter!r}: cannot be built: {scrub(str(exc))}"]
        ) from exc
    handle.tracer_provider = built.tracer_provider
    handle.meter_provider = built.meter_provider or otel_metrics.NoOpMeterProvider()
    handle.logger_provider = built.logger_provider
    handle._open_spans = built.open_spans
    # The threads the SDK started for its processors and readers are the export threads.
    built.cpu.adopt(t for t in threading.enumerate() if t not in before)
    handle._cpu = built.cpu
    handle._exporters = built.exporters
    handle._guards = built.guards
    ref = weakref.ref(handle)
    os.register_at_fork(after_in_child=lambda: _zero_after_fork(ref))

    for name in _SDK_EXPORT_LOGGERS:
        logger, flt = logging.getLogger(name), _OncePerMessage()
        logger.addFilter(SCRUB)  # no URL credentials in the SDK's own lines
        logger.addFilter(REFUSALS)  # it must see every record, even those let through once
        logger.addFilter(flt)
        handle._filters += [(logger, SCRUB), (logger, REFUSALS), (logger, flt)]
    handle._prometheus = built.prometheus
    if built.logger_provider is not None:
        handler = built.logging_handler
        handler.addFilter(_NotTelemetry())
        logging.getLogger().addHandler(handler)
        handle._log_handler = handler
    return handle


def _prometheus_destination(settings: Settings) -> str:
    """``remote write http://h:9090/api/v1/write`` (push) or the ``/metrics`` address (pull)."""
    if settings.prometheus_remote_write_url:
        return f"remote write {redact_url(settings.prometheus_remote_write_url)}"
    return f"http://127.0.0.1:{settings.prometheus_port}/metrics"


def _needs_cramjam(setting: str) -> None:
    """Raise a :class:`SettingsError` naming the setting and the install command when the snappy
    compressor that remote write needs is missing."""
    import importlib.util

    if importlib.util.find_spec("cramjam") is None:
        raise SettingsError(
            [
                f"{setting}: pushing to Prometheus needs the snappy compressor "
                "of the cramjam package (pip install cramjam)"
            ]
        )


def _signal_on(settings: Settings, signal_name: str) -> bool:
    return bool(getattr(settings, f"{signal_name}_enabled"))


def planned_destinations(
    settings: Settings, env: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """Where each signal will go under ``settings`` (``{"traces": ["file /x/traces.jsonl",
    "otlp grpc http://h:4317"], ...}``), without building anything; a signal that is off maps to
    ``[]``. With a likely protocol/port mismatch the OTLP entry ends with the hint.

    Raises:
        SettingsError: for a malformed OTLP protocol variable.
    """
    out: dict[str, list[str]] = {}
    for signal_name in _SIGNALS:
        if not (settings.enabled and _signal_on(settings, signal_name)):
            out[signal_name] = []
            continue
        entries = []
        for name in exporters_for(signal_name, settings):
            if name == "file":
                folder = Path(settings.file_dir).expanduser().resolve()
                entries.append(f"file {folder / f'{signal_name}.jsonl'}")
            elif name == "console":
                folder = Path(settings.file_dir).expanduser().resolve()
                entries.append(
                    f"console {folder / CONSOLE_FILE} (copied to the main process's stdout)"
                )
            elif name == "prometheus":
                entries.append(
                    f"prometheus {_prometheus_destination(settings)}"
                    + (
                        ""
                        if settings.prometheus_remote_write_url
                        else " (the first free port from it)"
                    )
                )
            else:
                protocol = otlp_protocol(signal_name, env)
                hint = protocol_hint(signal_name, protocol, env)
                entries.append(
                    f"otlp {otlp_destination(signal_name, protocol, env)}"
                    + (f" ({hint})" if hint else "")
                )
        out[signal_name] = entries
    return out
