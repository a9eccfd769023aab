"""Phase timing whose keys ARE the registry's span names, so a timing key and a span cannot drift.

    timer = Timer()
    with timer.span("rl.grpo.rollout", **{"rl.iteration": step}) as s:
        ...
        spanspec.annotate(s, **{"rl.num_tokens": n})  # known only at the end of the block
    logger.log(timer.take(), step, prefix="timing")   # {"rl.grpo.rollout": 1.23, ...}

``timer.span`` both measures the block and opens ``spanspec.span`` with the same name, and the
static check (``spanspec check``) sees it as a span call with a literal name. While a block that
carries ``rl.iteration`` runs, :func:`current_step` says which step it is (the live straggler line
names it), whether or not its span is traced.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry.trace import Span

import spanspec

__all__ = ["STEP_ATTRIBUTE", "Timer", "current_step"]

STEP_ATTRIBUTE = "rl.iteration"
"""The attribute that numbers a step (from 1; 0 before the first), as every loop passes it."""
_STEP: ContextVar[int | None] = ContextVar("nemo_rl_step", default=None)


def current_step() -> int | None:
    """Returns the ``rl.iteration`` of the innermost :meth:`Timer.span` block open in this context
    that carries one; None outside every such block (or in another thread or process)."""
    return _STEP.get()


class Timer:
    """Sums wall-clock seconds per phase name until ``take()`` hands them over."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def span(self, name: str, /, **attributes: Any) -> Iterator[Span]:
        """Times the block under ``name`` and opens the registry span ``name`` around it.

        Yields the OpenTelemetry span (a non-recording one when its group is off; late
        attributes go through ``spanspec.annotate``). The time is recorded even when the block
        raises.
        """
        start = time.perf_counter()
        step = attributes.get(STEP_ATTRIBUTE)
        token = _STEP.set(step) if type(step) is int else None
        try:
            with spanspec.span(name, **attributes) as otel_span:
                yield otel_span
        finally:
            if token is not None:
                _STEP.reset(token)
            self._seconds[name] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """Returns ``{span name: seconds}`` gathered since the last call, and starts afresh."""
        seconds, self._seconds = dict(self._seconds), defaultdict(float)
        return seconds
