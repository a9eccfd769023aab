"""Declared instruments, and recording through the registry's metric map.

Every metric in the registry becomes one instrument on the meter provider given to :func:`bind`
(gauge, counter, histogram, up-down counter; unit and description from the registry). Three
ways feed them:

- :func:`record_metrics` takes a logger's dict of scalars (``{"loss": 0.3}`` with prefix
  ``train``) and records each metric whose ``from:`` list names a key present in it (the first
  present wins). Keys no metric names are ignored.
- :func:`record` records one declared metric from code, e.g. ``gen_ai.client.token.usage`` with
  ``{"gen_ai.token.type": "input"}``.
- :func:`span_ended` is called by the export pipeline for every finished span; a histogram whose
  ``span:`` names it records the span's duration in seconds. Spans exist only while their group
  is on, so these histograms fill only then.

A declared metric that cannot be recorded (a value that is not a finite number, a counter asked to
go down, an undeclared name) is skipped, counted in :func:`skipped_counts` and warned about once
per metric, never dropped silently. Nothing here raises into the caller. Needs only
``opentelemetry-api``.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics

from spanspec.spec import MetricDef, Spec

__all__ = [
    "DURATION_BUCKETS_S",
    "MetricRecorder",
    "active_recorder",
    "bind",
    "record",
    "record_metrics",
    "skipped_counts",
    "span_ended",
    "unbind",
]

_log = logging.getLogger("spanspec.metrics")

# Step phases last from milliseconds to an hour; the SDK's default buckets are for milliseconds.
DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0,
    500.0, 1000.0, 2500.0, 5000.0,
)  # fmt: skip


def _buckets(metric: MetricDef) -> tuple[float, ...] | None:
    """The registry's boundaries; else, for seconds, :data:`DURATION_BUCKETS_S`; else the SDK's."""
    if metric.buckets is not None:
        return metric.buckets
    return DURATION_BUCKETS_S if metric.unit == "s" else None


def _create(meter: otel_metrics.Meter, metric: MetricDef) -> Any:
    kind, name, unit, brief = metric.instrument, metric.name, metric.unit, metric.brief
    if kind == "gauge":
        return meter.create_gauge(name, unit=unit, description=brief)
    if kind == "counter":
        return meter.create_counter(name, unit=unit, description=brief)
    if kind == "up_down_counter":
        return meter.create_up_down_counter(name, unit=unit, description=brief)
    if kind == "histogram":
        return meter.create_histogram(
            name,
            unit=unit,
            description=brief,
            explicit_bucket_boundaries_advisory=_buckets(metric),
        )
    raise ValueError(f"metric '{name}': unknown instrument '{kind}'")


def _number(value: Any) -> float | int | None:
    """``value`` as a finite int or float (numpy and torch scalars included), else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number: float | int = float(value)
    elif isinstance(value, str | bytes) or not hasattr(value, "__float__"):
        return None
    else:
        try:  # a one-element tensor or array
            number = float(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    return number if math.isfinite(number) else None


class MetricRecorder:
    """The instruments of one spec on one meter provider, and the bookkeeping of what was skipped.

    Use the module functions (:func:`bind`, :func:`record_metrics`, ...) rather than this class
    directly, unless you need two recorders at once.
    """

    def __init__(
        self, spec: Spec, meter_provider: otel_metrics.MeterProvider | None = None
    ) -> None:
        provider = (
            meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        )
        meter = provider.get_meter("spanspec")
        self.spec = spec
        self._defs: Mapping[str, MetricDef] = spec.metrics
        self._instruments = {name: _create(meter, m) for name, m in spec.metrics.items()}
        self._fed = [(name, m.from_keys) for name, m in spec.metrics.items() if m.from_keys]
        by_span: dict[str, list[tuple[Any, tuple[str, ...]]]] = {}
        for name, m in spec.metrics.items():
            if m.instrument == "histogram":
                for span_name in m.spans:
                    by_span.setdefault(span_name, []).append(
                        (self._instruments[name], m.attributes)
                    )
        self.span_histograms: Mapping[str, tuple[tuple[Any, tuple[str, ...]], ...]] = {
            k: tuple(v) for k, v in by_span.items()
        }
        self._skipped: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def skipped_counts(self) -> dict[str, int]:
        """Return how many values of each metric were skipped so far."""
        with self._lock:
            return dict(self._skipped)

    def _skip(self, name: str, why: str) -> bool:
        with self._lock:
            self._skipped[name] += 1
            first = name not in self._warned
            self._warned.add(name)
        if first:
            _log.warning(
                "metric '%s' skipped: %s (further skips of it are counted, not logged)", name, why
            )
        return False

    def _emit(self, name: str, value: Any, attributes: Mapping[str, Any] | None, key: str) -> bool:
        number = _number(value)
        if number is None:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            return self._skip(
                name, f"{key}={shown} ({type(value).__name__}) is not a finite number"
            )
        metric = self._defs[name]
        instrument = self._instruments[name]
        try:
            if metric.instrument == "gauge":
                instrument.set(number, attributes)
            elif metric.instrument == "histogram":
                instrument.record(number, attributes)
            elif metric.instrument == "counter":
                if number < 0:
                    return self._skip(name, f"{key}={number}: a counter cannot decrease")
                instrument.add(number, attributes)
            else:
                instrument.add(number, attributes)
        except Exception as exc:  # the SDK should never raise; if it does, count it
            return self._skip(name, f"{key}: {type(exc).__name__}: {exc}")
        return True

    def record_metrics(
        self,
        metrics: Mapping[str, Any],
        prefix: str = "",
        attributes: Mapping[str, Any] | None = None,
    ) -> int:
        """Record the declared metrics fed by ``metrics`` (keys read as ``prefix/key``).

        Returns:
            How many metrics were recorded.
        """
        prefix = prefix.rstrip("/")
        keyed = {f"{prefix}/{k}": v for k, v in metrics.items()} if prefix else metrics
        recorded = 0
        for name, from_keys in self._fed:
            for key in from_keys:
                if key in keyed:
                    recorded += self._emit(name, keyed[key], attributes, key)
                    break
        return recorded

    def record(self, name: str, value: Any, attributes: Mapping[str, Any] | None = None) -> bool:
        """Record ``value`` on the declared metric ``name``; attributes it does not declare are dropped.

        Returns:
            True when recorded, False when skipped (and counted).
        """
        metric = self._defs.get(name)
        if metric is None:
            return self._skip(name, "not declared in the registry")
        if attributes:
            undeclared = [k for k in attributes if k not in metric.attributes]
            if undeclared:
                self._warn_attributes(name, undeclared)
                attributes = {k: v for k, v in attributes.items() if k in metric.attributes}
        return self._emit(name, value, attributes, name)

    def _warn_attributes(self, name: str, keys: list[str]) -> None:
        tag = f"{name}:attributes"
        with self._lock:
            if tag in self._warned:
                return
            self._warned.add(tag)
        _log.warning(
            "metric '%s': attribute(s) %s not declared for it; dropped from the data point",
            name,
            ", ".join(sorted(keys)),
        )

    def span_ended(
        self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None
    ) -> None:
        """Record a finished span's duration on the histograms whose ``span:`` names it."""
        entries = self.span_histograms.get(name)
        if not entries:
            return
        seconds = (end_ns - start_ns) / 1e9
        for histogram, keys in entries:
            labels = {k: attributes[k] for k in keys if attributes and k in attributes} or None
            histogram.record(seconds, labels)


# -- the active recorder, bound once at start-up ---------------------------------------------------

_active: MetricRecorder | None = None


def bind(spec: Spec, meter_provider: otel_metrics.MeterProvider | None = None) -> MetricRecorder:
    """Create the instruments of ``spec`` on ``meter_provider`` (default: the global one).

    Returns:
        The recorder the module functions now use (replacing any earlier one).

    Raises:
        ValueError: for a metric whose instrument kind is unknown (a registry bug).
    """
    global _active
    _active = MetricRecorder(spec, meter_provider)
    return _active


def unbind() -> None:
    """Forget the active recorder; the module functions record nothing until the next :func:`bind`."""
    global _active
    _active = None


def active_recorder() -> MetricRecorder | None:
    """Return the recorder :func:`bind` made, or None."""
    return _active


def record_metrics(
    metrics: Mapping[str, Any], prefix: str = "", attributes: Mapping[str, Any] | None = None
) -> int:
    """Record every declared metric that a key of ``metrics`` feeds (``prefix/key``, first wins).

    Unknown keys are ignored; a value that is not a finite number is skipped, counted and warned
    about once per metric. Nothing is recorded when no recorder is bound (telemetry off).

    Returns:
        How many metrics were recorded.
    """
    recorder = _active
    return recorder.record_metrics(metrics, prefix, attributes) if recorder is not None else 0


def record(name: str, value: Any, attributes: Mapping[str, Any] | None = None) -> bool:
    """Record ``value`` on the declared metric ``name`` (e.g. ``gen_ai.client.token.usage``).

    Returns:
        True when recorded; False when skipped (counted, warned once) or when nothing is bound.
    """
    recorder = _active
    return recorder.record(name, value, attributes) if recorder is not None else False


def span_ended(
    name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None
) -> None:
    """Feed a finished span's duration to the histograms that declare it (no-op when unbound)."""
    recorder = _active
    if recorder is not None:
        recorder.span_ended(name, start_ns, end_ns, attributes)


def skipped_counts() -> dict[str, int]:
    """Return ``{metric name: values skipped}`` for the active recorder (empty when unbound)."""
    recorder = _active
    return recorder.skipped_counts() if recorder is not None else {}
