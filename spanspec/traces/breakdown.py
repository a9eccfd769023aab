"""Where the step time went, computed from the spans the run emitted (not a second bookkeeping).

Every step span (the registry's ``conventions.step_span``: a name, or each expansion of a
``{algorithm}`` template) is a step. Its descendants in the same trace are its phases;
each phase's time is summed per step and averaged over steps, and its share is of the mean step
time. For the efficiency buckets, the time of a span counts once, at the highest span below the
step whose group has a bucket (rollout, which has none, is counted through its children), and what
no bucketed span covers is ``unattributed``.

A phase that several processes ran (the ranks of a data-parallel group, each a lane of the
registry's ``conventions.lane_attributes``) is shown per rank: its mean is the mean over ranks,
and the slowest rank is named beside it with its own mean.

Where the spans carry the registry's ``conventions.cpu_attribute`` (the CPU seconds their process
spent inside them), each phase shows ``cpu/wall``: the CPU seconds of the measured spans at or
below it over their wall seconds. 1.0 is one core kept busy; below 1 the processes waited (a
collective, I/O) or were not given a core (a busy machine), which a slow step alone cannot tell
apart from a regression; above 1 several threads ran at once.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from spanspec.spec import Spec
from spanspec.traces.otlp_json import TraceStream
from spanspec.traces.steps import StepTimes, collect_steps, iter_steps

__all__ = [
    "Breakdown",
    "BreakdownFold",
    "PhaseTime",
    "breakdown_of_steps",
    "compute_breakdown",
    "step_breakdown",
]


@dataclass(frozen=True)
class PhaseTime:
    name: str
    depth: int
    mean_s: float
    """Seconds per step; for a phase several ranks ran, the mean over the ranks."""
    share: float
    bucket: str | None
    count: int
    ranks: int = 1
    """The processes (lanes) that ran it."""
    slowest: tuple[str, float] | None = None
    """With several ranks: the slowest one's lane and its seconds per step."""
    steps_with: int = 0
    """The steps it ran in (fewer than the run's for an occasional phase: evaluation)."""
    each_s: float = 0.0
    """Seconds per step it ran in (per occurrence, for an occasional phase)."""
    cpu_per_wall: float | None = None
    """CPU over wall seconds of the spans at or below it that carry the registry's
    ``conventions.cpu_attribute``; None where none does."""


@dataclass(frozen=True)
class Breakdown:
    steps: int
    mean_step_s: float
    phases: list[PhaseTime] = field(default_factory=list)
    buckets: dict[str, float] = field(default_factory=dict)  # bucket -> share of step time
    hint: str = ""  # with no steps: why, and what to turn on

    def __str__(self) -> str:
        if not self.steps:
            return f"where the step time went: {self.hint or 'no step spans in the trace files'}"
        ranked = any(p.slowest for p in self.phases)
        cpu = any(p.cpu_per_wall is not None for p in self.phases)
        lines = [
            f"where the step time went ({self.steps} steps, mean step {self.mean_step_s:.3f} s):",
            f"  {'phase':44} {'mean s':>8} {'share':>7}  {'bucket':10}"
            + (f" {'cpu/wall':>8}" if cpu else "")
            + ("  slowest rank (s/step)" if ranked else ""),
        ]
        for p in self.phases:
            label = "  " * p.depth + p.name
            row = f"  {label:44} {p.mean_s:8.3f} {p.share:7.1%}  {p.bucket or '-':10}"
            if cpu:
                row += f" {p.cpu_per_wall:8.2f}" if p.cpu_per_wall is not None else f" {'-':>8}"
            if p.slowest:
                row += f"  {p.slowest[0]} {p.slowest[1]:.3f} (mean of {p.ranks} ranks)"
            if 0 < p.steps_with < self.steps:  # averaged over every step: say how it was
                row += f"  in {p.steps_with} of {self.steps} steps, {p.each_s:.3f} s each"
            lines.append(row.rstrip())
        summary = ", ".join(f"{b} {s:.1%}" for b, s in self.buckets.items())
        lines.append(f"  efficiency: {summary}")
        if cpu:
            lines.append(
                "  cpu/wall: CPU seconds of the measured processes over their wall seconds "
                "(1.0 one busy core; below 1 waiting, or no core free: a busy machine)"
            )
        return "\n".join(lines)


def compute_breakdown(spans: Iterable[object], spec: Spec) -> Breakdown:
    """Break step time down by phase and bucket.

    ``spans`` are records with ``name``, ``trace_id``, ``span_id``, ``parent_span_id``,
    ``start_time_unix_nano`` and ``end_time_unix_nano`` (as read by :mod:`spanspec.traces.otlp_json`).
    A step is a span of the registry's ``conventions.step_span``.

    Returns:
        The :class:`Breakdown`; with no step span, one of zero steps whose ``hint`` says why.
    """
    return breakdown_of_steps(collect_steps(spans, spec), spec)


class BreakdownFold:
    """The breakdown as a fold: ``add`` each step (:class:`~spanspec.traces.steps.StepTimes`) as it
    is read, then ``result``; it keeps totals per phase and lane, never the steps."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, ...], dict[str, float]] = {}
        self.counts: dict[tuple[str, ...], int] = defaultdict(int)
        self.present: dict[tuple[str, ...], int] = defaultdict(int)  # steps a phase ran in
        self.bucket_totals: dict[str, float] = defaultdict(float)
        self.cpu: dict[tuple[str, ...], list[float]] = {}  # path -> [cpu s, wall s]
        self.step_total = 0.0
        self.steps = 0

    def add(self, step: StepTimes) -> None:
        """Count one step."""
        self.steps += 1
        self.step_total += step.seconds
        for path, lanes in step.phases.items():
            here = self.totals.setdefault(path, {})
            for lane, seconds in lanes.items():
                here[lane] = here.get(lane, 0.0) + seconds
            self.counts[path] += step.counts.get(path, 0)
            self.present[path] += 1
        for bucket, seconds in step.buckets.items():
            self.bucket_totals[bucket] += seconds
        for path, lanes in step.cpu.items():
            total = self.cpu.setdefault(path, [0.0, 0.0])
            for used, wall in lanes.values():
                total[0] += used
                total[1] += wall

    def result(self, spec: Spec) -> Breakdown:
        """The :class:`Breakdown` of the steps added; with none, one whose ``hint`` says why."""
        n, step_total = self.steps, self.step_total
        if not n:
            return Breakdown(0, 0.0, hint=_no_steps(spec))

        def own_bucket(name: str) -> str | None:
            entry = spec.spans.get(name)
            return spec.groups[entry.group].bucket if entry else None

        def bucket_of(path: tuple[str, ...]) -> str | None:
            # Work done for an overhead (or wasted) phase is that, whatever its own group says:
            # generation inside evaluation is overhead, as evaluation is.
            for name in reversed(path[:-1]):
                if (outer := own_bucket(name)) in ("overhead", "wasted"):
                    return outer
            return own_bucket(path[-1])

        phases = []
        for path in _tree_order(list(self.totals)):
            by_lane = self.totals[path]
            ranks = len(by_lane)
            total = sum(by_lane.values())
            slowest = max(by_lane.items(), key=lambda kv: kv[1]) if ranks > 1 else None
            used, wall = self.cpu.get(path, (0.0, 0.0))
            phases.append(
                PhaseTime(
                    name=path[-1],
                    depth=len(path) - 1,
                    mean_s=total / n / ranks,
                    share=total / ranks / step_total if step_total else 0.0,
                    bucket=bucket_of(path),
                    count=self.counts[path],
                    ranks=ranks,
                    slowest=(slowest[0], slowest[1] / n) if slowest else None,
                    steps_with=self.present[path],
                    each_s=total / ranks / self.present[path] if self.present[path] else 0.0,
                    cpu_per_wall=used / wall if wall > 0 else None,
                )
            )
        buckets = {
            b: t / step_total if step_total else 0.0
            for b, t in sorted(self.bucket_totals.items(), key=lambda kv: -kv[1])
        }
        return Breakdown(n, step_total / n, phases, buckets)


def breakdown_of_steps(steps: Iterable[StepTimes], spec: Spec) -> Breakdown:
    """The :class:`Breakdown` of steps read by :mod:`spanspec.traces.steps` (a fold: the steps
    may come from a stream and are not kept).

    Returns:
        The :class:`Breakdown`; with no step, one of zero steps whose ``hint`` says why.
    """
    fold = BreakdownFold()
    for step in steps:
        fold.add(step)
    return fold.result(spec)


def _no_steps(spec: Spec) -> str:
    """Why there are no steps, and what to turn on."""
    step_span = spec.conventions.step_span
    if not step_span:
        return "the registry names no step span (conventions.step_span), so there are no steps"
    names = sorted(spec.spans_of_template(step_span))
    group = spec.spans[names[0]].group if names else None
    if group is None:
        return f"no {step_span} spans in the trace files"
    preset = next((p for p in spec.presets if group in spec.resolve(p)), None)
    how = f", e.g. span_groups={preset}" if preset else ""
    return f"no {step_span} spans in the trace files (turn on the '{group}' group{how})"


def _tree_order(paths: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Phase paths so that each is followed by its own children, siblings first seen first."""
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = defaultdict(list)
    for path in paths:
        children[path[:-1]].append(path)
    out: list[tuple[str, ...]] = []
    stack = list(reversed(children[()]))
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(reversed(children.get(path, [])))
    return out


def step_breakdown(
    trace_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    spec: Spec | None = None,
    run_id: str | None = None,
) -> Breakdown:
    """Read the file exporter's ``traces.jsonl`` file(s) and return the :class:`Breakdown`.

    With ``run_id``, only the spans of that run count (the registry's
    ``conventions.run_attribute``, on the resource of every process of a job): a folder that
    several runs appended to reports the one asked for. ``spec`` defaults to the discovered
    registry. ``str()`` of the result is the table the examples print.

    Returns:
        The :class:`Breakdown`.

    Raises:
        ValueError: for a ``run_id`` where the registry names no run attribute.
        SpecError: when no ``spec`` is given and the default registry cannot be loaded.
    """
    spec = spec or _load()
    paths = [trace_files] if isinstance(trace_files, str | os.PathLike) else list(trace_files)
    if run_id is not None and spec.conventions.run_attribute is None:
        raise ValueError(
            "a run id needs the registry's conventions.run_attribute, which it does not name"
        )
    stream = TraceStream(paths)  # one pass, memory bounded by the steps in flight
    return breakdown_of_steps(iter_steps(stream.merged(), spec, run_id), spec)


def _load() -> Spec:
    from spanspec.registry import load

    return load()
