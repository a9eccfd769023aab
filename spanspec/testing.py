"""Test helpers: capture the spans your code emits, with clean global state per test.

With the package installed, pytest loads this module as a plugin, so any test can ask for the
``spans`` fixture::

    def test_a_batch_is_traced(spans):
        run_one_batch()
        assert spans.names() == ["pipeline.load", "pipeline.batch"]

The fixture activates the registry (strict, every group on unless a
``@pytest.mark.spanspec(groups=..., strict=..., registry=...)`` marker says otherwise) on a private
SDK tracer provider with an in-memory exporter, and deactivates spanspec afterwards. Outside
pytest, :func:`capture` does the same as a context manager. Needs ``opentelemetry-sdk``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spanspec.registry import load as load_spec
from spanspec.runtime import activate, deactivate
from spanspec.spec import Spec

__all__ = ["CapturedSpans", "capture", "spans"]


class CapturedSpans:
    """The finished spans of a :func:`capture`, in the order they ended."""

    def __init__(self, exporter: Any, spec: Spec, groups: frozenset[str]) -> None:
        self._exporter = exporter
        self.spec = spec
        self.groups = groups

    def all(self) -> list[Any]:
        """Every finished ``ReadableSpan`` so far."""
        return list(self._exporter.get_finished_spans())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.all())

    def __len__(self) -> int:
        return len(self.all())

    def __getitem__(self, index: int) -> Any:
        return self.all()[index]

    def names(self) -> list[str]:
        """Names of the finished spans, in end order."""
        return [s.name for s in self.all()]

    def named(self, name: str) -> list[Any]:
        """Finished spans called ``name``."""
        return [s for s in self.all() if s.name == name]

    def one(self, name: str) -> Any:
        """The single finished span called ``name``; AssertionError if there are 0 or several."""
        found = self.named(name)
        assert len(found) == 1, f"expected one span '{name}', found {len(found)}: {self.names()}"
        return found[0]

    def children(self, parent: Any) -> list[Any]:
        """Finished spans whose parent is ``parent``."""
        pid = parent.context.span_id
        return [s for s in self.all() if s.parent is not None and s.parent.span_id == pid]

    def clear(self) -> None:
        self._exporter.clear()


@contextmanager
def capture(
    spec: Spec | str | os.PathLike[str] | None = None,
    groups: str = "all",
    strict: bool = True,
    env_var: str | None = None,
) -> Iterator[CapturedSpans]:
    """Activate ``spec`` (a Spec, a registry path, or the default registry) into memory.

    ``env_var`` is None by default so a stray ``$<env_prefix>SPAN_GROUPS`` cannot change a test.
    Yields the :class:`CapturedSpans`; on exit spanspec is deactivated and the provider shut down.
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    enabled = activate(
        spec, groups=groups, tracer_provider=provider, strict=strict, env_var=env_var
    )
    try:
        yield CapturedSpans(exporter, spec, enabled)
    finally:
        deactivate()
        provider.shutdown()


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "spanspec(groups='all', strict=True, registry=None): options of the `spans` fixture",
    )


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed for the fixture
    pass
else:

    @pytest.fixture
    def spans(request: Any) -> Iterator[CapturedSpans]:
        """Finished spans of the test, captured in memory (see the module docstring)."""
        marker = request.node.get_closest_marker("spanspec")
        options = dict(marker.kwargs) if marker else {}
        registry = options.pop("registry", None)
        with capture(registry, **options) as captured:
            yield captured
