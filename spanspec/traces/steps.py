"""A run read step by step, in one pass: what each step spent, phase by phase and by bucket.

Every step span (the registry's ``conventions.step_span``) and the spans below it in the same
trace make one :class:`StepTimes`: the step's seconds, each phase's seconds per process (lane), and
each efficiency bucket's seconds. :class:`StepCollector` builds them from a stream of spans in end
order (:meth:`spanspec.traces.otlp_json.TraceStream.merged`): it holds a span only until the step
above it has ended and the stream has moved ``grace_s`` past that end, so memory is bounded by
the spans of the steps in flight (and those outside any step: validation, a job span), not by the
file. The breakdown, the report's step curve and ``spanspec diff`` are all folds over these steps.

A phase is a path of span names below the step (``("x.rollout", "x.generation")``); a phase that
several processes ran is kept per lane (the registry's ``conventions.lane_attributes``). For the
buckets, the time of a span counts once, at the highest span below the step whose group has a
bucket, and what no bucketed span covers is ``unattributed``.

Where the registry names a ``conventions.cpu_attribute`` (the CPU seconds a span's process spent
inside it), each phase also keeps, per lane, the CPU and wall seconds of the spans that carry it:
a span's own, or, for a phase that does not carry it (a driver's phase), those of the highest
carrying spans below it. Their ratio is how busy the processes doing the phase were.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spanspec.spec import Spec
from spanspec.traces.timeline import lane_of

__all__ = [
    "GRACE_S",
    "StepCollector",
    "StepTimes",
    "collect_steps",
    "iter_steps",
    "step_times",
]

GRACE_S = 5.0
"""How far past a step's end the stream must be before the step is closed (clock skew between
processes, spans queued out of end order)."""

Path_ = tuple[str, ...]
_PATHS: dict[Path_, Path_] = {}  # one tuple per phase path, shared by every step that has it


@dataclass(frozen=True)
class StepTimes:
    """What one step spent.

    ``phases`` maps a phase path (span names below the step) to its seconds per lane, in the
    order the phases were first met (depth first, children in start order); ``counts`` to its
    number of spans. ``buckets`` maps each bucket (and ``unattributed``) to seconds. ``cpu`` maps
    a phase path to ``(cpu s, wall s)`` per lane of the spans at or below it that carry the
    registry's ``conventions.cpu_attribute``.
    """

    name: str
    iteration: int | None
    trace_id: str
    run_id: str | None
    start_unix_nano: int
    seconds: float
    phases: dict[Path_, dict[str, float]] = field(default_factory=dict)
    counts: dict[Path_, int] = field(default_factory=dict)
    buckets: dict[str, float] = field(default_factory=dict)
    cpu: dict[Path_, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def phase_seconds(self, path: Path_) -> float | None:
        """The phase's seconds in this step, the mean over the lanes that ran it; None if absent."""
        lanes = self.phases.get(path)
        return sum(lanes.values()) / len(lanes) if lanes else None


def _seconds(s: Any) -> float:
    return max(0, s.end_time_unix_nano - s.start_time_unix_nano) / 1e9


def step_times(step: Any, children: dict[str, list[Any]], spec: Spec) -> StepTimes:
    """Fold one step span and its descendants (``children``: span id -> child spans) into a
    :class:`StepTimes`. Each span counts once, even where parent links loop.

    Returns:
        The step's :class:`StepTimes`.
    """
    conventions = spec.conventions

    def bucket_of(name: str) -> str | None:
        entry = spec.spans.get(name)
        return spec.groups[entry.group].bucket if entry else None

    phases: dict[Path_, dict[str, float]] = {}
    counts: dict[Path_, int] = {}
    buckets: dict[str, float] = defaultdict(float)
    cpu_key = conventions.cpu_attribute
    cpu: dict[Path_, dict[str, tuple[float, float]]] = {}
    covered = 0.0
    seen = {step.span_id}
    # (span, its path, whether a bucketed span above counted it, the depth of the nearest span
    # above that carries the CPU attribute: 0 for none)
    stack: list[tuple[Any, Path_, bool, int]] = [(step, (), False, 0)]
    while stack:
        node, path, counted, measured = stack.pop()
        kids = sorted(children.get(node.span_id, ()), key=lambda s: s.start_time_unix_nano)
        pending = []
        for child in kids:
            if child.span_id in seen:
                continue
            seen.add(child.span_id)
            here = _PATHS.setdefault((*path, child.name), (*path, child.name))
            lane = sys.intern(lane_of(getattr(child, "resource", {}) or {}, conventions).label)
            lanes = phases.setdefault(here, {})
            lanes[lane] = lanes.get(lane, 0.0) + _seconds(child)
            counts[here] = counts.get(here, 0) + 1
            bucket = bucket_of(child.name)
            below = counted
            if bucket and not counted:
                buckets[bucket] += _seconds(child)
                covered += _seconds(child)
                below = True
            inner = measured
            used = child.attributes.get(cpu_key) if cpu_key else None
            if isinstance(used, int | float) and not isinstance(used, bool):
                # counted at its own phase and each phase above it up to the nearest measured one
                wall = _seconds(child)
                for depth in range(measured + 1, len(here) + 1):
                    per_lane = cpu.setdefault(_PATHS[here[:depth]], {})
                    c, w = per_lane.get(lane, (0.0, 0.0))
                    per_lane[lane] = (c + float(used), w + wall)
                inner = len(here)
            pending.append((child, here, below, inner))
        stack.extend(reversed(pending))
    buckets["unattributed"] += max(0.0, _seconds(step) - covered)
    number = step.attributes.get(conventions.step_attribute) if conventions.step_attribute else None
    run_key = conventions.run_attribute
    run_id = step.resource.get(run_key) if run_key else None
    return StepTimes(
        name=step.name,
        iteration=number if isinstance(number, int) and not isinstance(number, bool) else None,
        trace_id=step.trace_id,
        run_id=run_id if isinstance(run_id, str) else None,
        start_unix_nano=step.start_time_unix_nano,
        seconds=_seconds(step),
        phases=phases,
        counts=counts,
        buckets=dict(buckets),
        cpu=cpu,
    )


class StepCollector:
    """Builds :class:`StepTimes` from spans fed in end order, holding only what is in flight.

    ``add(span)`` returns the steps it closed; ``finish()`` the rest. With ``run_id``, spans of
    other runs (the registry's ``conventions.run_attribute``) are skipped as they come. With
    ``on_step``, each closed step is also handed over with its step span and its member spans
    (the step span first), before they are let go.
    """

    def __init__(
        self,
        spec: Spec,
        run_id: str | None = None,
        grace_s: float = GRACE_S,
        on_step: Callable[[StepTimes, Any, list[Any]], None] | None = None,
    ) -> None:
        step_span = spec.conventions.step_span
        self.spec = spec
        self.step_names = spec.spans_of_template(step_span) if step_span else frozenset()
        self.run_key = spec.conventions.run_attribute
        self.run_id = run_id
        self.grace_ns = int(grace_s * 1e9)
        self.on_step = on_step
        self.spans = 0
        self.impossible = 0  # spans skipped for impossible times
        self.held_peak = 0
        self._by_id: dict[str, Any] = {}
        self._children: dict[str, list[Any]] = defaultdict(list)
        self._open: list[Any] = []  # step spans read, not yet closed
        self._watermark = 0

    def add(self, span: Any) -> list[StepTimes]:
        """Take one span; return the steps the stream has now moved past."""
        if self.run_id is not None and span.resource.get(self.run_key) != self.run_id:
            return []
        if not 0 <= span.start_time_unix_nano <= span.end_time_unix_nano < 2**64:
            self.impossible += 1  # no arithmetic on such times; live-check names the span
            return []
        self.spans += 1
        self._by_id[span.span_id] = span
        if span.parent_span_id:
            self._children[span.parent_span_id].append(span)
        self._watermark = max(self._watermark, span.end_time_unix_nano)
        closed: list[StepTimes] = []
        if span.name in self.step_names:
            self._open.append(span)
        elif not span.parent_span_id:  # a root outside any step: its remaining tree is done
            closed = self._close(lambda s: s.end_time_unix_nano <= span.end_time_unix_nano)
            self._forget(span)
        if self._open and self._open[0].end_time_unix_nano + self.grace_ns < self._watermark:
            limit = self._watermark - self.grace_ns
            closed += self._close(lambda s: s.end_time_unix_nano < limit)
        self.held_peak = max(self.held_peak, len(self._by_id))
        return closed

    def finish(self) -> list[StepTimes]:
        """Close every step still open (the end of the stream)."""
        return self._close(lambda s: True)

    def _close(self, due: Any) -> list[StepTimes]:
        ready = [s for s in self._open if due(s)]
        if not ready:
            return []
        self._open = [s for s in self._open if not due(s)]
        out = []
        for step in sorted(ready, key=lambda s: s.start_time_unix_nano):
            times = step_times(step, self._children, self.spec)
            out.append(times)
            if self.on_step is not None:
                self.on_step(times, step, self._members(step))
            self._forget(step)
        return out

    def _members(self, step: Any) -> list[Any]:
        """The step span and every span held below it, each once."""
        members = [step]
        seen = {step.span_id}
        stack = [step]
        while stack:
            for child in self._children.get(stack.pop().span_id, ()):
                if child.span_id not in seen:
                    seen.add(child.span_id)
                    members.append(child)
                    stack.append(child)
        return members

    def _forget(self, root: Any) -> None:
        """Drop ``root`` and what is held below it."""
        stack = [root]
        while stack:
            node = stack.pop()
            if self._by_id.get(node.span_id) is node:
                del self._by_id[node.span_id]
            stack.extend(self._children.pop(node.span_id, ()))


def collect_steps(spans: Iterable[Any], spec: Spec, run_id: str | None = None) -> list[StepTimes]:
    """Every step of ``spans`` (held in memory, in any order), earliest first.

    Returns:
        The :class:`StepTimes` of each step span.
    """
    children: dict[str, list[Any]] = defaultdict(list)
    steps = []
    collector = StepCollector(spec, run_id)
    for s in spans:
        if run_id is not None and s.resource.get(collector.run_key) != run_id:
            continue
        if s.parent_span_id:
            children[s.parent_span_id].append(s)
        if s.name in collector.step_names:
            steps.append(s)
    return [
        step_times(s, children, spec) for s in sorted(steps, key=lambda s: s.start_time_unix_nano)
    ]


def iter_steps(spans: Iterable[Any], spec: Spec, run_id: str | None = None) -> Iterator[StepTimes]:
    """Steps of a stream of spans in end order, each as soon as it is closed."""
    collector = StepCollector(spec, run_id)
    for s in spans:
        yield from collector.add(s)
    yield from collector.finish()
