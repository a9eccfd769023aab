"""How much of the linked work ran while a step was busy: the overlap figure.

A step may use work done elsewhere, ahead of it, in other traces and other processes, and say so
with span links (a consumer linking to what its producers made). The question such a run exists
to answer is whether the producers kept the step busy: did their work run *while* the step was
busy (overlapped), or did the step wait for it?

For one step, with ``targets`` the spans its links point at (see
:meth:`spanspec.traces.steps.StepCollector.linked`):

- the *linked lanes* are the lanes (:func:`spanspec.traces.timeline.lane_of`) of the targets;
- the *work* is the union of the spans in the linked lanes whose group has the ``productive``
  bucket, clipped to the step;
- the step's *wait* is the union of its own spans in the step's lane whose group has the
  ``idle`` bucket;
- the *overlap* is the work that ran while the step was busy: inside the step, outside its wait.

A run's figure is the sum over its steps (steps do not overlap one another). The interval helpers
are plain functions over ``(start, end)`` nanosecond pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from spanspec.spec import Spec
from spanspec.traces.timeline import lane_of

__all__ = [
    "Interval",
    "Overlap",
    "intersect",
    "length",
    "run_overlap",
    "step_overlap",
    "subtract",
    "union",
]

Interval = tuple[int, int]


@dataclass(frozen=True)
class Overlap:
    """Seconds of linked work during a step (or a run's steps), of it while the step was busy,
    and the step's wait. ``steps`` counts the steps with links that were summed."""

    work_s: float = 0.0
    overlap_s: float = 0.0
    wait_s: float = 0.0
    steps: int = 0

    @property
    def share(self) -> float:
        """The overlap over the work (0 when there was no work)."""
        return self.overlap_s / self.work_s if self.work_s else 0.0

    def __add__(self, other: Overlap) -> Overlap:
        return Overlap(
            self.work_s + other.work_s,
            self.overlap_s + other.overlap_s,
            self.wait_s + other.wait_s,
            self.steps + other.steps,
        )

    def line(self, work: str = "linked work", who: str = "the step") -> str:
        """One line: ``overlap: 0.12 s of 0.16 s linked work (75.0%) ran while the step was
        busy; the step waited 0.01 s``."""
        return (
            f"overlap: {self.overlap_s:.3f} s of {self.work_s:.3f} s {work} ({self.share:.1%}) "
            f"ran while {who} was busy; {who} waited {self.wait_s:.3f} s"
        )

    def to_json(self) -> dict[str, Any]:
        """The figure as the report embeds it."""
        return {
            "work_s": self.work_s,
            "overlap_s": self.overlap_s,
            "wait_s": self.wait_s,
            "share": self.share,
            "steps": self.steps,
            "line": self.line(),
        }


def step_overlap(
    step: Any, members: Sequence[Any], targets: Sequence[Any], shown: Iterable[Any], spec: Spec
) -> Overlap:
    """The overlap figure of one step (see the module's words): ``members`` are the step's own
    spans, ``targets`` what its links point at, ``shown`` the spans of the linked lanes around it
    (:meth:`~spanspec.traces.steps.StepCollector.linked` returns both).

    Returns:
        The step's :class:`Overlap`; all zero (``steps`` 0) when no link was followed.
    """
    if not targets:
        return Overlap()
    conventions = spec.conventions

    def bucket(name: str) -> str | None:
        entry = spec.spans.get(name)
        return spec.groups[entry.group].bucket if entry else None

    def interval(s: Any) -> Interval:
        return s.start_time_unix_nano, max(s.start_time_unix_nano, s.end_time_unix_nano)

    lanes = {lane_of(t.resource, conventions).key for t in targets}
    home = lane_of(step.resource, conventions).key
    whole = [interval(step)]
    work = intersect(
        union(
            interval(s)
            for s in shown
            if bucket(s.name) == "productive" and lane_of(s.resource, conventions).key in lanes
        ),
        whole,
    )
    wait = intersect(
        union(
            interval(s)
            for s in members
            if bucket(s.name) == "idle" and lane_of(s.resource, conventions).key == home
        ),
        whole,
    )
    busy = subtract(whole, wait)
    return Overlap(length(work) / 1e9, length(intersect(work, busy)) / 1e9, length(wait) / 1e9, 1)


def run_overlap(spans: Iterable[Any], spec: Spec, run_id: str | None = None) -> Overlap:
    """A run's overlap figure: :func:`step_overlap` summed over its steps, in one pass (the
    report's per-step figures add up to it). ``spans`` is a stream in end order
    (:meth:`~spanspec.traces.otlp_json.TraceStream.merged`) or a sequence in any order; with
    ``run_id``, only that run's spans count.

    Returns:
        The run's :class:`Overlap` (``steps``: how many steps had links).
    """
    from spanspec.traces.steps import StepCollector

    total = [Overlap()]

    def on_step(_times: Any, step: Any, members: list[Any]) -> None:
        targets, shown = collector.linked(step, members)
        total[0] += step_overlap(step, members, targets, shown, spec)

    collector = StepCollector(spec, run_id, on_step=on_step, keep_linked=True)
    if isinstance(spans, Sequence):
        spans = sorted(spans, key=lambda s: s.end_time_unix_nano)
    for s in spans:
        collector.add(s)
    collector.finish()
    return total[0]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """Where both hold; both sorted and disjoint (:func:`union` output)."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """``xs`` without ``ys``; both sorted and disjoint."""
    out = []
    for a, b in xs:
        start = a
        for c, d in ys:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
        if start < b:
            out.append((start, b))
    return out


def length(xs: list[Interval]) -> int:
    """The total length of disjoint intervals."""
    return sum(b - a for a, b in xs)
