"""The wrappers around every exporter: counting, warn-once on failure, switching off a signal
the backend refuses, and what every exported item is made to say on its way out (factored out of
:mod:`spanspec.export._pipeline`, which assembles the SDK parts around them).

On the way out, whoever set a value and whichever signal carries it: every attribute the
registry declares sensitive reads ``[REDACTED]`` (span, event, log-record and resource
attributes alike), and ``process.pid`` on the resource is the exporting process's own (a forked
child inherits its parent's resource object, in the tracer, the meter and the logger provider)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import (
    SpanExporter,
    SpanExportResult,
)

from spanspec import runtime
from spanspec._text import repair
from spanspec.export._stats import (
    REFUSALS,
    ExportCpu,
    PipelineStats,
)
from spanspec.spec import REDACTED

_log = logging.getLogger("spanspec.export")


class Guard:
    """Counts an exporter's results and warns once, naming the destination, when it fails."""

    def __init__(self, inner: Any, stats: PipelineStats, cpu: ExportCpu | None = None) -> None:
        self.inner = inner
        self.stats = stats
        self.cpu = cpu
        self._warned = False
        self._failing = False
        self.closed = False  # after shutdown the final report has spoken; stay quiet

    def run(self, count: int, call: Callable[[], Any], success: Any) -> Any:
        stats = self.stats
        if stats.refused:  # the backend will never take this signal: switched off
            stats.not_sent += count
            return success
        stats.submitted += count
        error = None
        started_cpu = time.thread_time()
        REFUSALS.take()
        try:
            result = call()
        except Exception as exc:  # an exporter must never take the export thread down
            result, error = None, exc
        if self.cpu is not None:
            self.cpu.exported(started_cpu)
        refused = REFUSALS.take() if result != success and stats.exporter == "otlp" else ""
        if refused:
            self._switch_off(refused, count)
            return None
        if result == success:
            stats.exported += count
            if self._failing and not self.closed:
                self._failing = False
                _log.info(
                    "telemetry: exporting %s to %s works again", stats.signal, stats.destination
                )
            return result
        stats.failed += count
        stats.failed_exports += 1
        self._failing = True
        if not self._warned and not self.closed:
            self._warned = True
            why = f": {type(error).__name__}: {error}" if error else ""
            _log.warning(
                "telemetry: exporting %s to %s failed%s. Training continues; further failures "
                "are counted and reported at shutdown.",
                stats.signal,
                stats.destination,
                why,
            )
        return None

    def _switch_off(self, refused: str, count: int) -> None:
        stats = self.stats
        stats.refused = refused
        stats.submitted -= count
        stats.not_sent += count
        if self.closed:
            return
        fix = {
            "traces": "send spans to a backend that takes them with "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "metrics": "serve metrics to Prometheus instead (telemetry.exporter=...,prometheus; "
            "with prometheus_remote_write_url set, pushed), or send them elsewhere with "
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "logs": "set telemetry.logs_enabled=false, or send logs elsewhere with "
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        }[stats.signal]
        _log.warning(
            "telemetry: %s does not take %s (%s): %s export switched off for this run "
            "(the rest goes on). To keep them: %s.",
            stats.destination,
            stats.signal,
            refused,
            stats.signal,
            fix,
        )


def _needs_redaction(attributes: Any, keys: frozenset[str]) -> bool:
    return bool(attributes) and any(
        attributes.get(k, REDACTED) != REDACTED for k in keys.intersection(attributes)
    )


def _redacted(attributes: Any, keys: frozenset[str]) -> dict[str, Any]:
    return {k: REDACTED if k in keys else v for k, v in attributes.items()}


# The last resource seen and what it is exported as, per (resource, pid, keys): a process has
# one or two resources, so this is one dict lookup per batch item.
_exported_resources: dict[tuple[int, int, int], tuple[Resource, Resource]] = {}


def exported_resource(resource: Resource, keys: frozenset[str]) -> Resource:
    """``resource`` as this process exports it: sensitive values redacted, its own ``process.pid``."""
    pid = os.getpid()
    key = (id(resource), pid, id(keys))
    hit = _exported_resources.get(key)
    if hit is not None and hit[0] is resource:
        return hit[1]
    attributes = resource.attributes
    wrong_pid = "process.pid" in attributes and attributes["process.pid"] != pid
    out = resource
    if wrong_pid or _needs_redaction(attributes, keys):
        fixed = _redacted(attributes, keys)
        if wrong_pid:
            fixed["process.pid"] = pid
        out = Resource(fixed, resource.schema_url)
    if len(_exported_resources) > 64:  # resources are few; never grow without bound
        _exported_resources.clear()
    _exported_resources[key] = (resource, out)
    return out


def _kept_dropped(original: Any, attributes: dict[str, Any]) -> Any:
    """``attributes`` as the span's or event's ``original``, keeping the count the SDK's limits
    dropped from it (exported as ``droppedAttributesCount``)."""
    out = BoundedAttributes(maxlen=None, attributes=attributes, immutable=True)
    out.dropped = getattr(original, "dropped_attributes", 0) or 0
    return out


def _repaired_value(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        return repair(value)
    if isinstance(value, (tuple, list)) and any(isinstance(v, str) for v in value):
        pairs = [_repaired_value(v) for v in value]
        if any(changed for _, changed in pairs):
            return tuple(v for v, _ in pairs), True
    return value, False


def _repaired_attributes(attributes: Any) -> dict[str, Any] | None:
    """The attributes with text repaired, or None when nothing needed it."""
    if not attributes:
        return None
    out, changed = {}, False
    for key, value in attributes.items():
        k, key_changed = repair(key)
        v, value_changed = _repaired_value(value)
        out[k] = v
        changed = changed or key_changed or value_changed
    return out if changed else None


def _suspect_text(value: Any) -> bool:
    if type(value) is str:
        return not value.isascii()
    if isinstance(value, (tuple, list)):
        return any(type(v) is str and not v.isascii() for v in value)
    return False


def _suspect(s: ReadableSpan) -> bool:
    """Whether ``s`` may hold something :func:`repair_spans` changes (cheap: ASCII is fine)."""
    name = s.name
    if type(name) is not str or not name.isascii():
        return True
    attributes = s._attributes  # the SDK's own mapping: no read-only view made per span
    if attributes:
        for key, value in attributes.items():
            if type(key) is not str or not key.isascii() or _suspect_text(value):
                return True
    for e in s._events:
        if type(e.name) is not str or not e.name.isascii():
            return True
        if e.attributes and any(
            type(k) is not str or _suspect_text(k) or _suspect_text(v)
            for k, v in e.attributes.items()
        ):
            return True
    return False


def scan(spans: Sequence[ReadableSpan]) -> tuple[bool, int]:
    """One pass over a batch: whether any span needs :func:`repair_spans`, and how many span and
    event attributes the SDK's limits dropped from them."""
    suspect, dropped = False, 0
    for s in spans:
        attributes = s._attributes
        dropped += getattr(attributes, "dropped", 0)
        for e in s._events:
            dropped += getattr(e._attributes, "dropped", 0)
        if not suspect:
            suspect = _suspect(s)
    return suspect, dropped


def repair_spans(spans: Sequence[ReadableSpan]) -> tuple[Sequence[ReadableSpan], int]:
    """Return ``spans`` as they can be encoded, and how many were changed: a name that is not
    text becomes its ``str()``, and every lone surrogate in a name, an attribute key or value,
    or an event becomes U+FFFD (see :mod:`spanspec._text`). One bad span never fails the batch
    it is in; the others are passed as they are."""
    out, repaired = [], 0
    for s in spans:
        if not _suspect(s):
            out.append(s)
            continue
        name, name_changed = repair(s.name)
        attributes = _repaired_attributes(s.attributes)
        events, events_changed = [], False
        for e in s.events:
            e_name, e_changed = repair(e.name)
            e_attributes = _repaired_attributes(e.attributes)
            if e_changed or e_attributes is not None:
                events_changed = True
                e = Event(
                    e_name,
                    _kept_dropped(e, e_attributes or dict(e.attributes or {})),
                    e.timestamp,
                )
            events.append(e)
        if not (name_changed or attributes is not None or events_changed):
            out.append(s)
            continue
        repaired += 1
        out.append(
            ReadableSpan(
                name=name,
                context=s.context,
                parent=s.parent,
                resource=s.resource,
                attributes=_kept_dropped(
                    s, attributes if attributes is not None else dict(s.attributes or {})
                ),
                events=events,
                links=s.links,
                kind=s.kind,
                status=s.status,
                start_time=s.start_time,
                end_time=s.end_time,
                instrumentation_scope=s.instrumentation_scope,
            )
        )
    return out, repaired


def redact(spans: Sequence[ReadableSpan], keys: frozenset[str]) -> Sequence[ReadableSpan]:
    """Return ``spans`` as exported: the value of every attribute in ``keys`` replaced by
    ``[REDACTED]`` on the span, its events and its resource, whoever set it, and the resource's
    ``process.pid`` this process's own. Spans with nothing to change are passed as is."""
    out = []
    given = fixed = None  # a batch's spans share one resource object: look it up once
    for s in spans:
        events = s.events
        if s.resource is not given:
            given, fixed = s.resource, exported_resource(s.resource, keys)
        resource = fixed
        if (
            resource is s.resource
            and not _needs_redaction(s.attributes, keys)
            and not any(_needs_redaction(e.attributes, keys) for e in events)
        ):
            out.append(s)
            continue
        out.append(
            ReadableSpan(
                name=s.name,
                context=s.context,
                parent=s.parent,
                resource=resource,
                attributes=_kept_dropped(s, _redacted(s.attributes or {}, keys)),
                events=[
                    Event(
                        e.name,
                        _kept_dropped(e, _redacted(e.attributes or {}, keys)),
                        e.timestamp,
                    )
                    for e in events
                ],
                links=s.links,
                kind=s.kind,
                status=s.status,
                start_time=s.start_time,
                end_time=s.end_time,
                instrumentation_scope=s.instrumentation_scope,
            )
        )
    return out


def redact_metrics(data: MetricsData, keys: frozenset[str]) -> MetricsData:
    """Return ``data`` with each resource as exported (see :func:`exported_resource`).

    Data-point attributes come only from instruments the registry declares, and the registry
    cannot declare a metric attribute sensitive; the resource is what a user can reach
    (``OTEL_RESOURCE_ATTRIBUTES``)."""
    changed = False
    resource_metrics = []
    for rm in data.resource_metrics:
        resource = exported_resource(rm.resource, keys)
        if resource is not rm.resource:
            changed = True
            rm = dataclasses.replace(rm, resource=resource)
        resource_metrics.append(rm)
    return MetricsData(resource_metrics=resource_metrics) if changed else data


def redact_logs(
    batch: Sequence[ReadableLogRecord], keys: frozenset[str]
) -> Sequence[ReadableLogRecord]:
    """Return ``batch`` with sensitive log-record attributes (``extra={...}`` of a log call)
    redacted and each resource as exported (see :func:`exported_resource`)."""
    out = []
    for record in batch:
        resource = exported_resource(record.resource, keys)
        attributes = record.log_record.attributes
        if _needs_redaction(attributes, keys):
            log_record = copy.copy(record.log_record)
            log_record.attributes = _redacted(attributes, keys)
            record = dataclasses.replace(record, log_record=log_record, resource=resource)
        elif resource is not record.resource:
            record = dataclasses.replace(record, resource=resource)
        out.append(record)
    return out


class GuardedSpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, stats: PipelineStats) -> None:
        self._guard = Guard(inner, stats)
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        suspect, dropped = scan(spans)
        self._guard.stats.attributes_dropped += dropped
        if suspect:  # rare: plain text everywhere is the common case, nothing copied then
            spans, repaired = repair_spans(spans)
            self._guard.stats.repaired += repaired
        spans = redact(spans, runtime.sensitive_keys())
        result = self._guard.run(
            len(spans), lambda: self.inner.export(spans), SpanExportResult.SUCCESS
        )
        return result if result is not None else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class GuardedMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, stats: PipelineStats) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._guard = Guard(inner, stats)
        self.inner = inner

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        stats = self._guard.stats
        stats.ended += 1
        metrics_data = redact_metrics(metrics_data, runtime.sensitive_keys())
        points = _data_points(metrics_data)
        stats.points_submitted += points
        result = self._guard.run(
            1,
            lambda: self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            MetricExportResult.SUCCESS,
        )
        if result is not None:
            stats.points_exported += points
        return result if result is not None else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


def _data_points(metrics_data: MetricsData) -> int:
    return sum(
        len(metric.data.data_points)
        for rm in metrics_data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    )


class GuardedLogExporter(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, stats: PipelineStats) -> None:
        self._guard = Guard(inner, stats)
        self.inner = inner

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        batch = redact_logs(batch, runtime.sensitive_keys())
        result = self._guard.run(
            len(batch), lambda: self.inner.export(batch), LogRecordExportResult.SUCCESS
        )
        return result if result is not None else LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
