"""W3C trace context into and out of a plain dict carrier.

The driver calls :func:`inject` when it asks a worker for work and passes the dict along; the
worker runs the work under :func:`attached`, so its spans are children of the driver's span.
The context is kept even where no span is recorded (a worker on a non-exporting rank), so it
still reaches the next process down the line. Needs only ``opentelemetry-api``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["attached", "extract", "inject"]

_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


def inject(context: Context | None = None) -> dict[str, str]:
    """Return the current (or given) context as W3C headers: ``{"traceparent": ...}``; empty if none."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier


def extract(carrier: Mapping[str, str] | None) -> Context:
    """Return the context a carrier describes (the empty context for an empty carrier)."""
    return _PROPAGATOR.extract(dict(carrier or {}))


@contextmanager
def attached(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Run the block with the carrier's trace context as the current context.

    An empty or missing carrier leaves the current context as it is.
    """
    if not carrier:
        yield
        return
    token = otel_context.attach(extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)
