"""Phase timing whose keys ARE the registry's span names, so a timing key and a span cannot drift.

    timer = Timer()
    with timer.span("rl.grpo.rollout", **{"rl.iteration": step}) as s:
        ...
    logger.log(timer.take(), step, prefix="timing")   # {"rl.grpo.rollout": 1.23, ...}

``timer.span`` both measures the block and opens ``spanspec.span`` with the same name, and the
static check (``spanspec check``) sees it as a span call with a literal name.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import spanspec

__all__ = ["Timer", "annotate"]


class Timer:
    """Sums wall-clock seconds per phase name until ``take()`` hands them over."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def span(self, name: str, /, **attributes: Any) -> Iterator[Any]:
        """Times the block under ``name`` and opens the registry span ``name`` around it.

        Yields the OpenTelemetry span, or None when its group is off. The time is recorded even
        when the block raises.
        """
        start = time.perf_counter()
        try:
            with spanspec.span(name, **attributes) as otel_span:
                yield otel_span
        finally:
            self._seconds[name] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """Returns ``{span name: seconds}`` gathered since the last call, and starts afresh."""
        seconds, self._seconds = dict(self._seconds), defaultdict(float)
        return seconds


def annotate(otel_span: Any, **attributes: Any) -> None:
    """Sets attributes known only at the end of a block (a reward mean, a byte count) on a span.

    Does nothing when ``otel_span`` is None (its group is off). Use declared keys only.
    """
    if otel_span is not None:
        for key, value in attributes.items():
            otel_span.set_attribute(key, value)
