"""Skew between lanes (the ranks of a group) doing the same work, step by step, and the straggler
rule, written once for a live process and for the trace readers.

For one step of one phase, each lane's seconds give a :class:`StepSkew`: the median, the slowest
lane and its ratio to the median. A lane is a **straggler** of that phase when it was the slowest
by more than ``threshold`` (a ratio above ``1 + threshold``) in at least half of the steps looked
at (:func:`stragglers`). :class:`SkewTracker` keeps the recent steps of every phase and says when
the set of stragglers changes, so a program warns once, and again only on change.

Nothing here knows what a lane, phase or step is called: the caller's keys are opaque strings.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_THRESHOLD",
    "DEFAULT_WINDOW",
    "SkewTracker",
    "StepSkew",
    "Straggler",
    "step_skew",
    "stragglers",
]

DEFAULT_THRESHOLD = 0.10
"""A slowest lane more than 10 % above the median counts as slow in that step."""
DEFAULT_WINDOW = 10
"""Recent steps the live rule looks at."""
MIN_STEPS = 2
"""A lane is not called a straggler on fewer steps than this."""


@dataclass(frozen=True, slots=True)
class StepSkew:
    """One step of one phase across lanes."""

    step: int
    seconds: Mapping[str, float]
    """Lane -> seconds in the phase this step."""
    median: float
    slowest: str
    ratio: float
    """Slowest lane's seconds over the median (1.0 when the median is 0)."""

    def slow(self, threshold: float) -> bool:
        """Whether the slowest lane is more than ``threshold`` above the median."""
        return self.ratio > 1.0 + threshold


def step_skew(step: int, seconds: Mapping[str, float]) -> StepSkew | None:
    """Returns the :class:`StepSkew` of ``seconds`` (lane -> seconds), or None with fewer than two
    lanes."""
    if len(seconds) < 2:
        return None
    median = statistics.median(seconds.values())
    slowest = max(sorted(seconds), key=lambda lane: seconds[lane])
    ratio = seconds[slowest] / median if median > 0 else 1.0
    return StepSkew(step, dict(seconds), median, slowest, ratio)


@dataclass(frozen=True, slots=True)
class Straggler:
    """A lane that was the slowest of its phase by more than the threshold in at least half of
    the steps looked at."""

    phase: str
    lane: str
    slow_steps: int
    """Steps in which it was the slowest by more than the threshold."""
    steps: int
    """Steps looked at."""
    ratio: float
    """Its median ratio to the step's median over its slow steps."""

    @property
    def percent_slower(self) -> float:
        """How much slower than the median, in percent."""
        return (self.ratio - 1.0) * 100.0


def stragglers(phase: str, history: Sequence[StepSkew], threshold: float) -> list[Straggler]:
    """Returns the stragglers of ``phase`` over ``history`` (at most one: the slowest in at least
    half of the steps), empty when there is none."""
    if len(history) < MIN_STEPS:
        return []
    slow: dict[str, list[float]] = {}
    for s in history:
        if s.slow(threshold):
            slow.setdefault(s.slowest, []).append(s.ratio)
    out = [
        Straggler(phase, lane, len(ratios), len(history), statistics.median(ratios))
        for lane, ratios in slow.items()
        if 2 * len(ratios) >= len(history) and len(ratios) >= MIN_STEPS
    ]
    return sorted(out, key=lambda s: (-s.slow_steps, s.lane))


class SkewTracker:
    """The recent steps of every phase; :meth:`observe` returns the phase's stragglers when they
    changed (a new straggler, a different one, or none any more), else None."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, window: int = DEFAULT_WINDOW) -> None:
        self.threshold = threshold
        self.window = window
        self._history: dict[str, deque[StepSkew]] = {}
        self._current: dict[str, tuple[str, ...]] = {}

    def observe(
        self, phase: str, step: int, seconds: Mapping[str, float]
    ) -> tuple[StepSkew | None, list[Straggler] | None]:
        """Adds one step of ``phase``; returns its :class:`StepSkew` (None with one lane) and the
        phase's stragglers when the set changed since the last call, else None."""
        skew = step_skew(step, seconds)
        if skew is None:
            return None, None
        history = self._history.setdefault(phase, deque(maxlen=self.window))
        history.append(skew)
        found = stragglers(phase, list(history), self.threshold)
        lanes = tuple(s.lane for s in found)
        if lanes == self._current.get(phase, ()):
            return skew, None
        self._current[phase] = lanes
        return skew, found

    def current(self) -> dict[str, tuple[str, ...]]:
        """Phase -> the lanes that are stragglers now."""
        return {p: lanes for p, lanes in self._current.items() if lanes}
