"""Lanes side by side: per step and phase, each lane's time, the skew, the straggler, the time
lost to it, each phase's peaks (the registry's ``conventions.peak_attributes``) per lane, and
its CPU over wall time per lane (``conventions.cpu_attribute``: a lane below the others was
waiting, or not given a core).

A *group* is the lanes sharing the first of ``conventions.lane_attributes`` (the ranks of one
worker group); the main lane is left out. For every step (``conventions.step_span``) and every
span name that two or more lanes of a group ran under it, each lane's seconds are summed; the
straggler rule is :func:`spanspec.skew.stragglers` over all the run's steps. Spans whose group's
bucket is ``idle`` (a collective) are not work: there, what each lane spent beyond the quickest
lane is time lost waiting for the slowest (:attr:`RankReport.lost_s`, one number per step).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanspec.skew import DEFAULT_THRESHOLD, StepSkew, Straggler, step_skew, stragglers
from spanspec.spec import Spec
from spanspec.traces.steps import StepCollector
from spanspec.traces.timeline import lane_of

__all__ = ["PhaseRanks", "RankFold", "RankReport", "compute_ranks", "heat_map_html"]


@dataclass(frozen=True)
class PhaseRanks:
    """One span name on the lanes of one group, step by step."""

    phase: str
    group: str
    lanes: list[str]
    steps: list[int]
    seconds: dict[str, list[float]]
    """Lane -> seconds in each of ``steps`` (0.0 where it did not run)."""
    skews: list[StepSkew]
    stragglers: list[Straggler]


@dataclass(frozen=True)
class RankReport:
    threshold: float
    phases: list[PhaseRanks] = field(default_factory=list)
    lost_s: dict[int, float] = field(default_factory=dict)
    """Step -> seconds the faster lanes waited in idle spans (collectives) for the slowest."""
    waits: tuple[str, ...] = ()
    """The idle span names that wait was measured in."""
    peaks: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """Peak attribute -> phase -> lane -> the largest value."""
    resources: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Lane -> the resource of its process."""
    cpu: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    """Phase -> lane -> (CPU seconds, wall seconds) of its spans carrying the CPU attribute."""

    def stragglers(self) -> list[Straggler]:
        """Every straggler, phase by phase."""
        return [s for p in self.phases for s in p.stragglers]

    def format(self, name_lane: Callable[[str, Mapping[str, Any]], str] | None = None) -> str:
        """The text section: each phase's median and slowest lane, the time lost, one line per
        straggler (``straggler: <lane> ...``; ``name_lane(label, resource)`` names a lane), and
        the peaks and CPU / wall per phase and lane. Empty when no group has two lanes and no
        span holds a peak or CPU seconds."""
        name = name_lane or _default_name
        lines = (
            []
            if not self.phases
            else [
                f"ranks: the slowest of each group per phase (medians over "
                f"{max(len(p.steps) for p in self.phases)} steps; straggler threshold "
                f"{self.threshold:.0%}):",
                f"  {'phase':34} {'lanes':>5} {'median s':>9} {'slowest':>12} {'ratio':>6}",
            ]
        )
        for p in self.phases:
            ratios = sorted(s.ratio for s in p.skews)
            medians = sorted(s.median for s in p.skews)
            slow_counts: dict[str, int] = defaultdict(int)
            for s in p.skews:
                slow_counts[s.slowest] += 1
            slowest = max(sorted(slow_counts), key=slow_counts.__getitem__) if slow_counts else "-"
            lines.append(
                f"  {p.phase:34} {len(p.lanes):5d} {_mid(medians):9.3f} {slowest:>12} "
                f"{_mid(ratios):5.2f}x"
            )
        if self.lost_s:
            mean = sum(self.lost_s.values()) / len(self.lost_s)
            lines.append(
                f"  time lost to the slowest rank: {mean:.3f} s per step (the faster ranks' wait "
                f"in {', '.join(self.waits)}; bucket idle)"
            )
        found = self.stragglers()
        for s in found if self.phases else ():
            lane = name(s.lane, self.resources.get(s.lane, {}))
            lines.append(
                f"  straggler: {lane} is {s.percent_slower:.0f}% slower than the median in "
                f"{s.phase}, the slowest in {s.slow_steps} of {s.steps} steps"
            )
        if self.phases and not found:
            lines.append("  no straggler")
        for attr, by_phase in self.peaks.items():
            lanes = sorted({lane for v in by_phase.values() for lane in v})
            lines.append(f"peak {attr} per phase and lane (MiB):")
            lines.append(f"  {'phase':34} " + " ".join(f"{lane:>12}" for lane in lanes))
            for phase, values in by_phase.items():
                cells = [
                    f"{values[lane] / 2**20:12.1f}" if lane in values else f"{'-':>12}"
                    for lane in lanes
                ]
                lines.append(f"  {phase:34} " + " ".join(cells))
        if self.cpu:
            lanes = sorted({lane for v in self.cpu.values() for lane in v}, key=_lane_sort)
            lines.append(
                "cpu/wall per phase and lane (1.0: one busy core; below: waiting or no core):"
            )
            lines.append(f"  {'phase':34} " + " ".join(f"{lane:>12}" for lane in lanes))
            for phase, values in self.cpu.items():
                cells = [
                    f"{values[lane][0] / values[lane][1]:12.2f}"
                    if values.get(lane, (0.0, 0.0))[1] > 0
                    else f"{'-':>12}"
                    for lane in lanes
                ]
                lines.append(f"  {phase:34} " + " ".join(cells))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _mid(values: list[float]) -> float:
    return values[len(values) // 2] if values else 0.0


def _default_name(label: str, resource: Mapping[str, Any]) -> str:
    pid = resource.get("process.pid")
    return f"{label} (pid {pid})" if pid is not None else label


def compute_ranks(
    spans: Iterable[Any], spec: Spec, threshold: float = DEFAULT_THRESHOLD
) -> RankReport:
    """Returns the :class:`RankReport` of span records (as :mod:`spanspec.traces.otlp_json`
    reads them, in end order as :meth:`~spanspec.traces.otlp_json.TraceStream.merged` gives
    them) under the registry ``spec``; memory holds the steps in flight, not the spans."""
    if isinstance(spans, Sequence):  # a list, in any order: the collector needs end order
        spans = sorted(spans, key=lambda s: s.end_time_unix_nano)
    fold = RankFold(spec, threshold)
    collector = StepCollector(spec, on_step=lambda _times, step, members: fold.add(step, members))
    for span in spans:
        collector.add(span)
    collector.finish()
    return fold.result()


class RankFold:
    """Per-rank aggregates of closed steps (a :class:`~spanspec.traces.steps.StepCollector`'s
    ``on_step``): each worker lane's seconds per phase and step, waits, memory peaks."""

    def __init__(self, spec: Spec, threshold: float = DEFAULT_THRESHOLD) -> None:
        self.spec = spec
        self.threshold = threshold
        self._peaks: dict[str, dict[str, dict[str, float]]] = {
            a: {} for a in spec.conventions.peak_attributes
        }
        self._resources: dict[str, Mapping[str, Any]] = {}
        self._cpu: dict[str, dict[str, tuple[float, float]]] = {}
        # (phase, group) -> step -> lane -> seconds
        self._work: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(dict)
        self._waits: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(dict)
        self._order: list[int] = []
        self._numbers: set[int] = set()  # of _order, for a look-up that does not grow with it

    def _idle(self, name: str) -> bool:
        entry = self.spec.spans.get(name)
        return entry is not None and self.spec.groups[entry.group].bucket == "idle"

    def add(self, step: Any, members: Iterable[Any]) -> None:
        """Take one closed step: its step span and the spans of its tree."""
        conventions = self.spec.conventions
        cpu_key = conventions.cpu_attribute
        number = conventions.step_attribute
        n = step.attributes.get(number) if number else None
        n = n if isinstance(n, int) and n not in self._numbers else len(self._order)
        self._order.append(n)
        self._numbers.add(n)
        for child in members:
            if child is step:
                continue
            lane = lane_of(child.resource or {}, conventions)
            if lane.order[0] != 1:  # the main lane, or a process without lane attributes
                continue
            self._resources.setdefault(lane.label, child.resource)
            for attr in conventions.peak_attributes:
                value = child.attributes.get(attr)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    by_lane = self._peaks[attr].setdefault(child.name, {})
                    by_lane[lane.label] = max(by_lane.get(lane.label, 0), value)
            used = child.attributes.get(cpu_key) if cpu_key else None
            if isinstance(used, int | float) and not isinstance(used, bool):
                per_lane = self._cpu.setdefault(child.name, {})
                c, w = per_lane.get(lane.label, (0.0, 0.0))
                per_lane[lane.label] = (c + float(used), w + child.duration_ns / 1e9)
            table = self._waits if self._idle(child.name) else self._work
            per_lane = table[(child.name, str(lane.key[0]))].setdefault(n, {})
            per_lane[lane.label] = per_lane.get(lane.label, 0.0) + child.duration_ns / 1e9

    def result(self) -> RankReport:
        """The report of the steps taken so far."""
        phases = []
        for (phase, group), by_step in self._work.items():
            lanes = sorted({lane for v in by_step.values() for lane in v}, key=_lane_sort)
            if len(lanes) < 2:
                continue
            nums = [n for n in self._order if n in by_step]
            skews = [k for n in nums if (k := step_skew(n, by_step[n])) is not None]
            phases.append(
                PhaseRanks(
                    phase,
                    group,
                    lanes,
                    nums,
                    {lane: [by_step[n].get(lane, 0.0) for n in nums] for lane in lanes},
                    skews,
                    stragglers(phase, skews, self.threshold),
                )
            )
        lost: dict[int, float] = {}
        wait_names = []
        for (phase, _), by_step in self._waits.items():
            if any(len(v) > 1 for v in by_step.values()):
                wait_names.append(phase)
            for n, per_lane in by_step.items():
                if len(per_lane) > 1:
                    least = min(per_lane.values())
                    lost[n] = lost.get(n, 0.0) + sum(t - least for t in per_lane.values())
        return RankReport(
            self.threshold,
            phases,
            lost,
            tuple(dict.fromkeys(wait_names)),
            {a: v for a, v in self._peaks.items() if v},
            self._resources,
            self._cpu,
        )


def _lane_sort(label: str) -> tuple[str, int, str]:
    head, _, tail = label.rpartition(" ")
    return (head, int(tail), "") if tail.isdigit() else (label, 0, label)


def pick_phase(report: RankReport) -> PhaseRanks | None:
    """The phase a heat map shows: one with a straggler, else the most skewed, else None."""
    if not report.phases:
        return None
    with_straggler = [p for p in report.phases if p.stragglers]
    pool = with_straggler or report.phases
    return max(pool, key=lambda p: sum(s.ratio for s in p.skews) / max(len(p.skews), 1))


def heat_map_html(report: RankReport, name_lane: Callable[[str], str] | None = None) -> str:
    """A ranks x steps table for :func:`pick_phase`'s phase: each cell the lane's seconds,
    shaded by its ratio to the step's median; the straggler's row is marked ``straggler``.
    Empty when no group has two lanes."""
    p = pick_phase(report)
    if p is None:
        return ""
    medians = {s.step: s.median for s in p.skews}
    marked = {s.lane for s in p.stragglers}
    head = "".join(f'<th class="num">{n}</th>' for n in p.steps)
    rows = []
    for lane in p.lanes:
        cells = []
        for n, t in zip(p.steps, p.seconds[lane], strict=True):
            ratio = t / medians[n] if medians.get(n) else 1.0
            heat = max(0.0, min(1.0, (ratio - 1.0) / 1.0))
            color = f"rgba(220,38,38,{0.08 + 0.8 * heat:.2f})" if ratio > 1.0 else "transparent"
            cells.append(
                f'<td class="num" style="background:{color}" title="{ratio:.2f}x the median">'
                f"{t:.3f}</td>"
            )
        label = html.escape(name_lane(lane) if name_lane else lane)
        tag = ' <b class="straggler">straggler</b>' if lane in marked else ""
        rows.append(f"<tr><th>{label}{tag}</th>{''.join(cells)}</tr>")
    return (
        f'<h2>Ranks × steps: {html.escape(p.phase)} <span class="meta">(seconds per step; '
        f"red: slower than the step's median; threshold {report.threshold:.0%})</span></h2>"
        f'<div class="card" id="rank-heat-map" style="overflow-x:auto"><table>'
        f"<tr><th>rank \\ step</th>{head}</tr>{''.join(rows)}</table></div>"
    )
