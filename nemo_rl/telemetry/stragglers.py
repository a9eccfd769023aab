"""Naming the straggler while the run goes: the driver's side of :mod:`spanspec.skew`.

A group of several ranks reports, per call of a worker phase, each rank's busy seconds
(:meth:`StragglerWatch.observe`): for training the rank's own ``rl.worker.train_microbatch``
time (the wait in the all-reduce is not work: a fast rank waits there for the slow one), for
scoring the time from the call to the rank's answer. Each observation records the
``rl.rank.skew`` metric (slowest over median, by group and phase) and feeds the straggler rule
over the recent calls; the first time a rank is named, and again only when that changes, one line
is printed, naming the step it fired at (``rl.iteration``, as the console and the metrics number
it: the loop's step whose phase made the call, :func:`nemo_rl.utils.timer.current_step`)::

    straggler: policy rank 1 (node 3f2a9c01, pid 4711) is 85% slower than the median in
    rl.worker.train_microbatch at step 7, the slowest in 4 of the last 4 steps (telemetry.straggler_threshold 0.1)

The end-of-run section and the report compute the same rule from the spans
(:mod:`spanspec.traces.ranks`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from nemo_rl.utils.timer import current_step
from spanspec import metrics
from spanspec.skew import DEFAULT_THRESHOLD, DEFAULT_WINDOW, SkewTracker, Straggler

__all__ = ["StragglerWatch", "configure", "watch"]


class StragglerWatch:
    """The recent per-rank times of every (group, phase); prints a line when its stragglers
    change (to ``out``, default stdout)."""

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        window: int = DEFAULT_WINDOW,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.threshold = threshold
        self._tracker = SkewTracker(threshold, window)
        self._steps: dict[str, int] = {}
        self._out = out or _print
        self.lines: list[str] = []

    def observe(
        self,
        group: str,
        phase: str,
        seconds: Sequence[float],
        describe: Callable[[int], str],
        step: int | None = None,
    ) -> None:
        """Adds one call of ``phase`` on ``group`` (``seconds[r]``: rank ``r``'s busy time);
        ``describe(r)`` names a rank (``policy rank 1 (node ..., pid ...)``); ``step`` is the
        loop's step the call belongs to, by default that of the loop's phase around the call
        (:func:`~nemo_rl.utils.timer.current_step`; the line leaves it out when there is none).
        Does nothing for a group of one."""
        if len(seconds) < 2:
            return
        key = f"{group} {phase}"
        call = self._steps.get(key, 0)
        self._steps[key] = call + 1
        lanes = {str(r): float(s) for r, s in enumerate(seconds)}
        skew, changed = self._tracker.observe(key, call, lanes)
        if skew is not None:
            metrics.record(
                "rl.rank.skew", skew.ratio, {"rl.worker.group": group, "rl.phase": phase}
            )
        if changed is None:
            return
        step = current_step() if step is None else step
        line = self._line(group, phase, changed, describe, step)
        self.lines.append(line)
        self._out(line)

    def _line(
        self,
        group: str,
        phase: str,
        found: list[Straggler],
        describe: Callable[[int], str],
        step: int | None,
    ) -> str:
        how = f"(telemetry.straggler_threshold {self.threshold:g})"
        at = f" at step {step}" if step is not None else ""
        if not found:
            return f"straggler: none any more in {group} {phase}{at} {how}"
        s = found[0]
        return (
            f"straggler: {describe(int(s.lane))} is {s.percent_slower:.0f}% slower than the median "
            f"in {phase}{at}, the slowest in {s.slow_steps} of the last {s.steps} steps {how}"
        )


def _print(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


_watch = StragglerWatch()


def configure(threshold: float) -> StragglerWatch:
    """Starts a fresh watch with ``threshold`` (``telemetry.straggler_threshold``); returns it."""
    global _watch
    _watch = StragglerWatch(threshold)
    return _watch


def watch() -> StragglerWatch:
    """Returns the process's watch."""
    return _watch
