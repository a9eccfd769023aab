"""spanspec: a declarative registry of OpenTelemetry spans and metrics, and a near-free runtime.

    spec = spanspec.load("examples/pipeline/registry.yaml")   # or load(): the installed one
    spanspec.activate(spec, groups="default")
    with spanspec.span("pipeline.load", **{"pipeline.batch.index": 3}) as s:
        rows = ...
        spanspec.annotate(s, **{"pipeline.rows": rows})  # checked as span()'s keywords are

Importing this package loads only the OpenTelemetry API; pydantic and PyYAML load when a
registry file is read (:func:`load`), the OpenTelemetry SDK only in :mod:`spanspec.export`.
"""

from __future__ import annotations

from spanspec.findings import Finding, SpecError
from spanspec.registry import load
from spanspec.runtime import activate, annotate, deactivate, span, traced
from spanspec.spec import Spec

__all__ = [
    "Finding",
    "Spec",
    "SpecError",
    "activate",
    "annotate",
    "deactivate",
    "load",
    "span",
    "traced",
]
__version__ = "0.1.0"
