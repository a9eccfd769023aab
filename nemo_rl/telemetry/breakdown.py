"""Where the step time went. The step breakdown is computed in :mod:`spanspec.traces.breakdown` (the
report uses it too); what only async GRPO has, the collector's side and the overlap of its
generation with training, is here."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanspec.traces.breakdown import Breakdown, PhaseTime, compute_breakdown, step_breakdown

__all__ = [
    "Breakdown",
    "CollectorBreakdown",
    "PhaseTime",
    "collector_breakdown",
    "collector_report",
    "compute_breakdown",
    "compute_collector_breakdown",
    "name_rank",
    "run_summary",
    "step_breakdown",
]


# -- ranks: the straggler, the time lost to it, each phase's peak memory ---------------------------


def name_rank(label: str, resource: Mapping[str, Any]) -> str:
    """``policy rank 1 (node 3f2a9c01, pid 4711)``: a lane named as the run's messages name a
    rank (``label`` when the resource does not say)."""
    group, rank = resource.get("rl.worker.group"), resource.get("rl.worker.rank")
    if group is None or rank is None:
        return label
    node = str(resource.get("rl.worker.node") or "?")[:8]
    pid = resource.get("process.pid")
    return f"{group} rank {rank} (node {node}" + (f", pid {pid})" if pid is not None else ")")


def run_summary(
    trace_file: str, run_id: str | None, threshold: float, peak_flops: float | None = None
) -> str:
    """What the entry point prints at the end of a run, from one pass over ``trace_file``: the
    step breakdown (:mod:`spanspec.traces.breakdown`), then the ranks section
    (:mod:`spanspec.traces.ranks`: per worker phase of a group with several ranks the median and
    slowest rank, the time lost to the slowest rank, a ``straggler: <group> rank N ...`` line for
    each straggler and none for the others, the peak memory per phase and rank), then each
    rank's achieved model FLOP/s and tokens/s in its training micro-batches, with MFU where
    ``peak_flops`` (``cluster.peak_flops_per_worker``) is known. Memory holds the steps in
    flight and the aggregates, never the file."""
    from spanspec.registry import load
    from spanspec.traces import otlp_json
    from spanspec.traces.breakdown import BreakdownFold
    from spanspec.traces.ranks import RankFold
    from spanspec.traces.steps import StepCollector

    spec = load()
    breakdown, ranks, flops = BreakdownFold(), RankFold(spec, threshold), _FlopsFold()

    def on_step(times: Any, step: Any, members: list[Any]) -> None:
        breakdown.add(times)
        ranks.add(step, members)
        for span in members:
            flops.add(span)

    collector = StepCollector(spec, run_id, on_step=on_step)
    for span in otlp_json.TraceStream([trace_file]).merged():
        collector.add(span)
    collector.finish()
    sections = (
        str(breakdown.result(spec)),
        ranks.result().format(name_rank),
        flops.lines(peak_flops),
    )
    return "\n".join(t for t in sections if t)


class _FlopsFold:
    """Each rank's model FLOPs, tokens and seconds over its ``rl.worker.train_microbatch`` spans."""

    def __init__(self) -> None:
        self.per_rank: dict[str, list[float]] = {}
        self.gpu = False

    def add(self, s: Any) -> None:
        if s.name != "rl.worker.train_microbatch" or "rl.flops" not in s.attributes:
            return
        self.gpu = self.gpu or "rl.memory.cuda_peak_allocated_bytes" in s.attributes
        who = name_rank(str(s.resource.get("rl.worker.rank", "?")), s.resource).split(" (")[0]
        row = self.per_rank.setdefault(who, [0.0, 0.0, 0.0])
        row[0] += float(s.attributes["rl.flops"])
        row[1] += float(s.attributes.get("rl.num_tokens", 0))
        row[2] += s.duration_ns / 1e9

    def lines(self, peak: float | None) -> str:
        if not self.per_rank:
            return ""
        lines = ["model FLOPs of the training micro-batches (6 x params x tokens + attention):"]
        for who, (flops, tokens, seconds) in sorted(self.per_rank.items()):
            rate = flops / max(seconds, 1e-9)
            mfu = f", MFU {rate / peak:.1%}" if peak else ""
            lines.append(
                f"  {who}: {flops:.3g} FLOPs, {rate:.3g} FLOP/s, "
                f"{tokens / max(seconds, 1e-9):.0f} tokens/s{mfu}"
            )
        if not peak:
            lines.append(
                "  MFU: see the rl.mfu metric (the GPU's known peak)"
                if self.gpu
                else "  MFU unknown: no GPU and no cluster.peak_flops_per_worker (achieved FLOP/s"
                " above)"
            )
        return "\n".join(lines)


# -- async GRPO: the collector's side and the overlap -------------------------------------------

COLLECTOR_PHASES = (
    "rl.async_grpo.rollout",
    "rl.async_grpo.generation",
    "rl.async_grpo.reward",
    "rl.async_grpo.wait_for_weights",
)


@dataclass(frozen=True)
class CollectorBreakdown:
    """Where the async-GRPO collector's time went, and how much of its sampling overlapped the
    trainer's work (step time outside ``wait_for_trajectories``)."""

    span_s: float
    """From the collector's first span's start to its last span's end."""
    phases: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (count, total s)
    generation_s: float = 0.0
    overlap_s: float = 0.0
    """Generation time during which the trainer was busy in a step (not waiting)."""
    trainer_wait_s: float = 0.0

    def __str__(self) -> str:
        if not self.phases.get("rl.async_grpo.rollout", (0, 0.0))[0]:
            return "collector: no rl.async_grpo.rollout spans in the trace files"
        lines = [
            f"where the collector's time went ({self.span_s:.3f} s from its first span to its last):",
            f"  {'phase':44} {'count':>6} {'total s':>8} {'share':>7}",
        ]
        for name in COLLECTOR_PHASES:
            count, total = self.phases.get(name, (0, 0.0))
            label = ("  " if name in COLLECTOR_PHASES[1:3] else "") + name
            share = total / self.span_s if self.span_s else 0.0
            lines.append(f"  {label:44} {count:6d} {total:8.3f} {share:7.1%}")
        share = self.overlap_s / self.generation_s if self.generation_s else 0.0
        lines.append(
            f"  overlap: {self.overlap_s:.3f} s of {self.generation_s:.3f} s generation ({share:.1%}) "
            f"ran while the trainer was busy; the trainer waited {self.trainer_wait_s:.3f} s"
        )
        return "\n".join(lines)


def compute_collector_breakdown(spans: Iterable[object]) -> CollectorBreakdown:
    """The collector's phases (count, total seconds) and the generation time that overlapped the
    trainer's busy time, from span records as :func:`compute_breakdown` takes them."""
    spans = list(spans)

    def interval(s: object) -> tuple[int, int]:
        return s.start_time_unix_nano, max(s.start_time_unix_nano, s.end_time_unix_nano)

    mine = [s for s in spans if s.name in COLLECTOR_PHASES]
    if not mine:
        return CollectorBreakdown(0.0)
    phases: dict[str, tuple[int, float]] = {}
    for s in mine:
        count, total = phases.get(s.name, (0, 0.0))
        a, b = interval(s)
        phases[s.name] = (count + 1, total + (b - a) / 1e9)
    span_s = (max(interval(s)[1] for s in mine) - min(interval(s)[0] for s in mine)) / 1e9
    waits = _union([interval(s) for s in spans if s.name == "rl.async_grpo.wait_for_trajectories"])
    busy = _subtract(_union([interval(s) for s in spans if s.name == "rl.async_grpo.step"]), waits)
    generation = _union([interval(s) for s in mine if s.name == "rl.async_grpo.generation"])
    return CollectorBreakdown(
        span_s=span_s,
        phases=phases,
        generation_s=_length(generation) / 1e9,
        overlap_s=_length(_intersect(generation, busy)) / 1e9,
        trainer_wait_s=_length(waits) / 1e9,
    )


def collector_breakdown(
    trace_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    run_id: str | None = None,
) -> CollectorBreakdown:
    """Read ``traces.jsonl`` file(s) and return the :class:`CollectorBreakdown` (of ``run_id``
    only, when given)."""
    from spanspec.traces import otlp_json

    paths = [trace_files] if isinstance(trace_files, str | os.PathLike) else list(trace_files)
    # One pass, keeping only the spans the table is made of (not the file).
    wanted = {*COLLECTOR_PHASES, "rl.async_grpo.wait_for_trajectories", "rl.async_grpo.step"}
    spans = [
        s
        for s in otlp_json.TraceStream(paths)
        if s.name in wanted and (run_id is None or s.resource.get("rl.run_id") == run_id)
    ]
    return compute_collector_breakdown(spans)


def collector_report(trace_file: str, run_id: str | None) -> str:
    """The table ``run_async_grpo.py`` prints after the step breakdown (an entry point's
    ``Loop.report``)."""
    return str(collector_breakdown(trace_file, run_id=run_id))


Interval = tuple[int, int]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """Both sorted and disjoint (``_union`` output)."""
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


def _subtract(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
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


def _length(xs: list[Interval]) -> int:
    return sum(b - a for a, b in xs)
