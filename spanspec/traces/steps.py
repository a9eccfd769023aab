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
bucket, and what no bucketed span covers is ``unattributed``; the lanes of one group (the first
lane attribute: the ranks of a worker group, side by side in the same step) count as their
mean, so ranks doing the same work at once are the step's time once, not once a rank.

Where the registry names a ``conventions.cpu_attribute`` (the CPU seconds a span's process spent
inside it), each phase also keeps, per lane, the CPU and wall seconds of the spans that carry it:
a span's own, or, for a phase that does not carry it (a driver's phase), those of the highest
carrying spans below it. Their ratio is how busy the processes doing the phase were.
"""

from __future__ import annotations

import heapq
import sys
from collections import OrderedDict, defaultdict
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
    "latest_run",
    "step_times",
]

GRACE_S = 5.0
"""How far past a step's end the stream must be before the step is closed (clock skew between
processes, spans queued out of end order)."""
HELD_SPANS = 30_000
"""At most this many spans are held as records. Past it, a span that arrives with no held
child (a leaf, or a subtree already folded) is folded into its parent's sums instead (seconds,
counts, buckets, CPU per phase path and lane): a step's times stay exact, but its waterfall and
its per-rank peaks lack those spans (:attr:`StepCollector.folded` counts them)."""
LINKED_HORIZON_S = 600.0
LINKED_SPANS = 10_000
"""With ``keep_linked``, the collector holds the spans that ended in the last
:data:`LINKED_HORIZON_S` seconds of the stream, at most :data:`LINKED_SPANS` of them, where a
step's span links can find the work they point at (done in other traces, ahead of the step)."""

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
    folded: int = 0
    """Spans counted in these times but not held as records (past :data:`HELD_SPANS`): a
    waterfall of the step lacks them."""

    def phase_seconds(self, path: Path_) -> float | None:
        """The phase's seconds in this step, the mean over the lanes that ran it; None if absent."""
        lanes = self.phases.get(path)
        return sum(lanes.values()) / len(lanes) if lanes else None


def _seconds(s: Any) -> float:
    return max(0, s.end_time_unix_nano - s.start_time_unix_nano) / 1e9


class _Fold:
    """The sums of the spans folded below one held span, by path relative to it: what
    :func:`step_times` would have counted for them had they been held."""

    __slots__ = ("buckets", "counts", "cpu", "open", "phases", "spans")

    def __init__(self) -> None:
        self.phases: dict[Path_, dict[str, float]] = {}
        self.counts: dict[Path_, int] = {}
        # of the highest bucketed spans: (lane group, lane) -> bucket -> seconds
        self.buckets: dict[tuple[Any, str], dict[str, float]] = {}
        self.cpu: dict[Path_, dict[str, tuple[float, float]]] = {}
        self.open: dict[str, tuple[float, float]] = {}  # the highest measured spans, per lane
        self.spans = 0

    def add(
        self,
        span: Any,
        below: _Fold | None,
        lane: str,
        bucket: str | None,
        used: Any,
        bucket_lane: tuple[Any, str],
    ) -> None:
        """Fold ``span`` (and ``below``, what was folded under it) in as a child; ``lane`` is
        its lane's label, ``bucket_lane`` its ``(group, label)`` for the buckets."""
        seconds = _seconds(span)
        own = (span.name,)
        if below is not None:
            self.spans += below.spans
            for rel, lanes in below.phases.items():
                _add_lanes(self.phases.setdefault((*own, *rel), {}), lanes)
            for rel, n in below.counts.items():
                self.counts[(*own, *rel)] = self.counts.get((*own, *rel), 0) + n
            for rel, lanes in below.cpu.items():
                _add_pairs(self.cpu.setdefault((*own, *rel), {}), lanes)
        self.spans += 1
        lanes = self.phases.setdefault(own, {})
        lanes[lane] = lanes.get(lane, 0.0) + seconds
        self.counts[own] = self.counts.get(own, 0) + 1
        if bucket:
            into = self.buckets.setdefault(bucket_lane, {})
            into[bucket] = into.get(bucket, 0.0) + seconds
        elif below is not None:
            for key, by_bucket in below.buckets.items():
                _add_lanes(self.buckets.setdefault(key, {}), by_bucket)
        if isinstance(used, int | float) and not isinstance(used, bool):
            _add_pairs(self.cpu.setdefault(own, {}), {lane: (float(used), seconds)})
            _add_pairs(self.open, {lane: (float(used), seconds)})
        elif below is not None and below.open:
            _add_pairs(self.cpu.setdefault(own, {}), below.open)
            _add_pairs(self.open, below.open)


def _add_lanes(into: dict[str, float], lanes: dict[str, float]) -> None:
    for lane, v in lanes.items():
        into[lane] = into.get(lane, 0.0) + v


def _add_pairs(into: dict[str, tuple[float, float]], lanes: dict[str, tuple[float, float]]) -> None:
    for lane, (c, w) in lanes.items():
        c0, w0 = into.get(lane, (0.0, 0.0))
        into[lane] = (c0 + c, w0 + w)


def step_times(
    step: Any,
    children: dict[str, list[Any]],
    spec: Spec,
    folded: dict[str, _Fold] | None = None,
) -> StepTimes:
    """Fold one step span and its descendants (``children``: span id -> child spans; ``folded``:
    span id -> the sums of spans folded below it) into a :class:`StepTimes`. Each span counts
    once, even where parent links loop.

    Returns:
        The step's :class:`StepTimes`.
    """
    conventions = spec.conventions

    def bucket_of(name: str) -> str | None:
        entry = spec.spans.get(name)
        return spec.groups[entry.group].bucket if entry else None

    phases: dict[Path_, dict[str, float]] = {}
    counts: dict[Path_, int] = {}
    # (lane group, lane) -> bucket -> seconds: a group's lanes are averaged at the end
    lane_buckets: dict[tuple[Any, str], dict[str, float]] = {}
    cpu_key = conventions.cpu_attribute
    cpu: dict[Path_, dict[str, tuple[float, float]]] = {}
    folded_spans = 0
    seen = {step.span_id}

    # (span, its path, whether a bucketed span above counted it, the depth of the nearest span
    # above that carries the CPU attribute: 0 for none)
    stack: list[tuple[Any, Path_, bool, int]] = [(step, (), False, 0)]
    while stack:
        node, path, counted, measured = stack.pop()
        fold = folded.get(node.span_id) if folded else None
        if fold is not None:  # what was folded below it, at the paths below its own
            folded_spans += fold.spans
            for rel, lanes in fold.phases.items():
                here = _PATHS.setdefault((*path, *rel), (*path, *rel))
                _add_lanes(phases.setdefault(here, {}), lanes)
                counts[here] = counts.get(here, 0) + fold.counts.get(rel, 0)
            if not counted:
                for key, by_bucket in fold.buckets.items():
                    _add_lanes(lane_buckets.setdefault(key, defaultdict(float)), by_bucket)
            for rel, lanes in fold.cpu.items():
                _add_pairs(cpu.setdefault(_PATHS[(*path, *rel)], {}), lanes)
            # the highest measured spans folded count at each phase above them, up to the
            # nearest measured one (``measured``: its depth, at or above this node)
            for depth in range(measured + 1, len(path) + 1):
                _add_pairs(cpu.setdefault(_PATHS[path[:depth]], {}), fold.open)
        kids = sorted(children.get(node.span_id, ()), key=lambda s: s.start_time_unix_nano)
        pending = []
        for child in kids:
            if child.span_id in seen:
                continue
            seen.add(child.span_id)
            here = _PATHS.setdefault((*path, child.name), (*path, child.name))
            child_lane = lane_of(getattr(child, "resource", {}) or {}, conventions)
            lane = sys.intern(child_lane.label)
            lanes = phases.setdefault(here, {})
            lanes[lane] = lanes.get(lane, 0.0) + _seconds(child)
            counts[here] = counts.get(here, 0) + 1
            bucket = bucket_of(child.name)
            below = counted
            if bucket and not counted:
                into = lane_buckets.setdefault(_bucket_lane(child_lane), defaultdict(float))
                into[bucket] += _seconds(child)
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
    buckets = _lane_means(lane_buckets)
    covered = sum(buckets.values())
    buckets["unattributed"] = buckets.get("unattributed", 0.0) + max(0.0, _seconds(step) - covered)
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
        folded=folded_spans,
    )


def _bucket_lane(lane: Any) -> tuple[Any, str]:
    """``(group, lane)`` of a lane, for the buckets: a process without the lane attributes is a
    group of its own (nothing says it is one of several ranks)."""
    return (lane.key[0] if lane.order[0] != 2 else lane.key, lane.label)


def _lane_means(lane_buckets: dict[tuple[Any, str], dict[str, float]]) -> dict[str, float]:
    """Bucket -> seconds of a step: each group's lanes as their mean (ranks side by side), the
    groups summed (they take turns: the driver, then a worker group)."""
    groups: dict[Any, list[dict[str, float]]] = defaultdict(list)
    for (group, _), by_bucket in lane_buckets.items():
        groups[group].append(by_bucket)
    buckets: dict[str, float] = defaultdict(float)
    for lanes in groups.values():
        for by_bucket in lanes:
            for b, v in by_bucket.items():
                buckets[b] += v / len(lanes)
    return buckets


class StepCollector:
    """Builds :class:`StepTimes` from spans fed in end order, holding only what is in flight.

    ``add(span)`` returns the steps it closed; ``finish()`` the rest. With ``run_id``, spans of
    other runs (the registry's ``conventions.run_attribute``) are skipped as they come. With
    ``on_step``, each closed step is also handed over with its step span and its member spans
    (the step span first), before they are let go. With ``keep_linked``, the recent spans are
    held too (bounded: :data:`LINKED_HORIZON_S`, :data:`LINKED_SPANS`), so that ``on_step``
    can ask :meth:`linked` for the work the step's span links point at.

    Memory: a step is closed once the stream is ``grace_s`` past its end, or, when the stream
    goes back in time by more than that (files that repeat the same times: copies of a run,
    runs appended with the same clock), at once: a later span that belongs to no held tree
    starts over, so what is open is done. At most :data:`HELD_SPANS` spans are held as
    records; past that, leaves are folded into their parent's sums (``folded`` counts them).
    """

    def __init__(
        self,
        spec: Spec,
        run_id: str | None = None,
        grace_s: float = GRACE_S,
        on_step: Callable[[StepTimes, Any, list[Any]], None] | None = None,
        keep_linked: bool = False,
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
        self.folded = 0  # spans folded into sums, not held (past HELD_SPANS)
        self.rewinds = 0  # times the stream went back in time and the open steps were closed
        self._folded: dict[str, _Fold] = {}  # parent id -> what was folded below it
        self._by_id: dict[str, Any] = {}
        self._children: dict[str, list[Any]] = defaultdict(list)
        self._open: list[tuple[int, int, Any]] = []  # heap of (end, order, step span) not closed
        self.pressed = 0  # steps closed early because HELD_SPANS spans were held
        self._watermark = 0
        self.keep_linked = keep_linked
        # span id -> (span, lane key), in end order; parent id -> {span id: span}
        self._recent: OrderedDict[str, tuple[Any, tuple[Any, ...]]] = OrderedDict()
        self._recent_children: dict[str, dict[str, Any]] = defaultdict(dict)

    def add(self, span: Any) -> list[StepTimes]:
        """Take one span; return the steps the stream has now moved past."""
        if self.run_id is not None and span.resource.get(self.run_key) != self.run_id:
            return []
        if not span.has_possible_times:
            self.impossible += 1  # no arithmetic on such times; live-check names the span
            return []
        self.spans += 1
        closed: list[StepTimes] = []
        end = span.end_time_unix_nano
        if (
            self._open
            and end + self.grace_ns < self._watermark
            and span.parent_span_id not in self._by_id
            and span.span_id not in self._children
        ):  # back in time, into no tree held: the stream started over (a copy, another run)
            self.rewinds += 1
            closed = self._close(None)
        if len(self._by_id) >= HELD_SPANS and self._open:
            # Held full while steps are open (times that collide): close the older half of
            # them (those that end first), rather than fold the spans of steps that are done.
            self.pressed += (n := max(1, len(self._open) // 2))
            closed += self._close(None, n)
        if self.keep_linked:
            self._remember(span)
        self._watermark = max(self._watermark, end)
        if (
            len(self._by_id) >= HELD_SPANS
            and span.parent_span_id
            and span.span_id not in self._children
            and span.name not in self.step_names
        ):
            self._fold(span)
            return closed + self._close_past()
        self._by_id[span.span_id] = span
        if span.parent_span_id:
            self._children[span.parent_span_id].append(span)
        if span.name in self.step_names:
            heapq.heappush(self._open, (end, self.spans, span))
        elif not span.parent_span_id:  # a root outside any step: its remaining tree is done
            closed += self._close(end)
            self._forget(span)
        closed += self._close_past()
        self.held_peak = max(self.held_peak, len(self._by_id))
        return closed

    def _close_past(self) -> list[StepTimes]:
        """Close the open steps the stream is ``grace_s`` past."""
        limit = self._watermark - self.grace_ns
        if not self._open or self._open[0][0] >= limit:
            return []
        return self._close(limit - 1)

    def _fold(self, span: Any) -> None:
        """Add ``span`` (with what was folded below it) to its parent's sums, not holding it."""
        conventions = self.spec.conventions
        entry = self.spec.spans.get(span.name)
        bucket = self.spec.groups[entry.group].bucket if entry else None
        span_lane = lane_of(getattr(span, "resource", {}) or {}, conventions)
        lane = sys.intern(span_lane.label)
        used = span.attributes.get(conventions.cpu_attribute) if conventions.cpu_attribute else None
        fold = self._folded.get(span.parent_span_id)
        if fold is None:
            fold = self._folded[span.parent_span_id] = _Fold()
        below = self._folded.pop(span.span_id, None)
        fold.add(span, below, lane, bucket, used, _bucket_lane(span_lane))
        self.folded += 1

    def _remember(self, span: Any) -> None:
        """Hold ``span`` among the recent ones; let the oldest go past the horizon or the cap."""
        lane = lane_of(getattr(span, "resource", {}) or {}, self.spec.conventions).key
        self._recent[span.span_id] = (span, lane)
        if span.parent_span_id:
            self._recent_children[span.parent_span_id][span.span_id] = span
        horizon = span.end_time_unix_nano - int(LINKED_HORIZON_S * 1e9)
        while self._recent:
            old_id, (old, _) = next(iter(self._recent.items()))
            if len(self._recent) <= LINKED_SPANS and old.end_time_unix_nano >= horizon:
                break
            del self._recent[old_id]
            siblings = self._recent_children.get(old.parent_span_id or "")
            if siblings is not None:
                siblings.pop(old_id, None)
                if not siblings:
                    del self._recent_children[old.parent_span_id]

    def linked(self, step: Any, members: list[Any]) -> tuple[list[Any], list[Any]]:
        """What the links of a step's spans point at, among the recent spans (``keep_linked``).

        Returns:
            ``(targets, shown)``: the linked spans found (in link order, each once; those in the
            step itself left out), and what a waterfall of the step shows beside its own spans:
            the targets and their descendants, and every span of the targets' lanes that ran
            between the earliest target's start and the step's end (with its descendants), so
            what those lanes did while the step ran is there too. Both empty without links.
        """
        have = {s.span_id for s in members}
        targets: dict[str, tuple[Any, tuple[Any, ...]]] = {}
        for s in members:
            for link in getattr(s, "links", ()):
                found = self._recent.get(link.span_id)
                if found is not None and found[0].trace_id == link.trace_id:
                    if link.span_id not in have:
                        targets.setdefault(link.span_id, found)
        if not targets:
            return [], []
        lanes = {lane for _, lane in targets.values()}
        start = min(
            step.start_time_unix_nano, *(t.start_time_unix_nano for t, _ in targets.values())
        )
        end = step.end_time_unix_nano
        shown: dict[str, Any] = {sid: t for sid, (t, _) in targets.items()}
        slack = int(GRACE_S * 1e9)  # the stream is in end order, give or take the grace
        for sid, (s, lane) in reversed(self._recent.items()):
            if s.end_time_unix_nano < start - slack:
                break
            if (
                lane in lanes
                and sid not in have
                and s.start_time_unix_nano < end
                and s.end_time_unix_nano > start
            ):
                shown.setdefault(sid, s)
        stack = list(shown.values())
        while stack:  # their descendants, wherever they ran
            for cid, child in self._recent_children.get(stack.pop().span_id, {}).items():
                if cid not in shown and cid not in have:
                    shown[cid] = child
                    stack.append(child)
        return [t for t, _ in targets.values()], list(shown.values())

    def finish(self) -> list[StepTimes]:
        """Close every step still open (the end of the stream)."""
        return self._close(None)

    def _close(self, until: int | None, most: int | None = None) -> list[StepTimes]:
        """Close the open steps that end at or before ``until`` (all for None), at most
        ``most`` of them, those that end first."""
        ready = []
        while self._open and (until is None or self._open[0][0] <= until):
            if most is not None and len(ready) >= most:
                break
            ready.append(heapq.heappop(self._open)[2])
        if not ready:
            return []
        out = []
        for step in sorted(ready, key=lambda s: s.start_time_unix_nano):
            times = step_times(step, self._children, self.spec, self._folded)
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
            self._folded.pop(node.span_id, None)
            stack.extend(self._children.pop(node.span_id, ()))


def latest_run(first_start: dict[str, int]) -> str | None:
    """The run a reader shows when not told which (``spanspec report`` and ``view`` alike): of
    the runs in the files (run id -> the start of its earliest span), the one that started last
    (a folder appended to by a repeated or resumed run holds the older ones first). None when the
    files name no run."""
    return max(first_start, key=lambda run: (first_start[run], run)) if first_start else None


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
