"""Where the step time went. The step breakdown is computed in :mod:`spanspec.traces.breakdown` (the
report uses it too); what only async GRPO has, the collector's side and the overlap of its
generation with training, is here."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import spanspec
from spanspec.traces.breakdown import Breakdown, PhaseTime, compute_breakdown, step_breakdown
from spanspec.traces.overlap import Overlap, step_overlap

__all__ = [
    "Breakdown",
    "CollectorBreakdown",
    "CollectorFold",
    "PhaseTime",
    "SummaryFold",
    "collector_breakdown",
    "compute_breakdown",
    "compute_collector_breakdown",
    "name_rank",
    "run_summary",
    "step_breakdown",
    "steps_done_lines",
]


# -- ranks: the straggler, the time lost to it, each phase's peak memory ---------------------------


def name_rank(label: str, resource: Mapping[str, Any]) -> str:
    """``policy rank 1 (node 3f2a9c01, pid 4711)``: a lane named as the run's messages name a
    rank (``label`` when the resource does not say; no node where it names none, as a TRL
    rank's: ``trainer rank 1 (pid 4711)``)."""
    group, rank = resource.get("rl.worker.group"), resource.get("rl.worker.rank")
    if group is None or rank is None:
        return label
    node, pid = resource.get("rl.worker.node"), resource.get("process.pid")
    where = [f"node {str(node)[:8]}"] if node else []
    where += [f"pid {pid}"] if pid is not None else []
    return f"{group} rank {rank}" + (f" ({', '.join(where)})" if where else "")


class SummaryFold(Protocol):
    """One more section of the end-of-run summary, folded in the same pass over the traces as the
    breakdown (an entry point's ``Loop.report`` makes one from the registry): ``add`` takes
    every span of the run as it is read (in end order), ``add_step`` each step as it closes
    (its step span, its member spans, and ``linked()``, what the step's span links point at:
    :meth:`spanspec.traces.steps.StepCollector.linked`, held only when ``follows_links``);
    ``str()`` is the section."""

    follows_links: bool

    def add(self, span: Any) -> None: ...

    def add_step(
        self, step: Any, members: list[Any], linked: Callable[[], tuple[list[Any], list[Any]]]
    ) -> None: ...


def run_summary(
    trace_file: str,
    run_id: str | None,
    threshold: float,
    peak_flops: float | None = None,
    reports: Sequence[Callable[[spanspec.Spec], SummaryFold]] = (),
) -> str:
    """What the entry point prints at the end of a run, from one pass over ``trace_file``: the
    step breakdown (:mod:`spanspec.traces.breakdown`), then the ranks section
    (:mod:`spanspec.traces.ranks`: per worker phase of a group with several ranks the median and
    slowest rank, the time lost to the slowest rank, a ``straggler: <group> rank N ...`` line for
    each straggler and none for the others, the peak memory per phase and rank), then each
    rank's achieved model FLOP/s and tokens/s in its training micro-batches, with MFU where
    ``peak_flops`` (``cluster.peak_flops_per_worker``) is known, then the section of each fold
    ``reports`` make (async GRPO's :class:`CollectorFold`), fed by the same reader. Memory
    holds the steps in flight and the aggregates (and, for a fold that follows links, the recent
    spans: bounded, see :class:`~spanspec.traces.steps.StepCollector`), never the file."""
    from spanspec.registry import load
    from spanspec.traces import otlp_json
    from spanspec.traces.breakdown import BreakdownFold
    from spanspec.traces.ranks import RankFold
    from spanspec.traces.steps import StepCollector

    spec = load()
    breakdown, ranks, flops = BreakdownFold(), RankFold(spec, threshold), _FlopsFold()
    extra = [make(spec) for make in reports]

    def on_step(times: Any, step: Any, members: list[Any]) -> None:
        breakdown.add(times)
        ranks.add(step, members)
        for span in members:
            flops.add(span)
        for fold in extra:
            fold.add_step(step, members, lambda: collector.linked(step, members))

    collector = StepCollector(
        spec, run_id, on_step=on_step, keep_linked=any(f.follows_links for f in extra)
    )
    _read(otlp_json.TraceStream([trace_file]).merged(), collector, run_id, extra)
    sections = (
        str(breakdown.result(spec)),
        ranks.result().format(name_rank),
        flops.lines(peak_flops),
        *(str(fold) for fold in extra),
    )
    return "\n".join(t for t in sections if t)


def steps_done_lines(
    settings: Any,
    run_dir: str,
    threshold: float,
    peak_flops: float | None = None,
    reports: Sequence[Callable[[spanspec.Spec], SummaryFold]] = (),
) -> list[str]:
    """What a run prints once its steps are done (the entry point, the TRL callback): the
    :func:`run_summary` of its trace file, where the traces are and how to draw the report of
    ``run_dir``; no lines when telemetry was off or wrote no trace file."""
    trace_file = os.path.join(settings.file_dir, "traces.jsonl")
    if not (settings.enabled and "file" in settings.exporters and os.path.exists(trace_file)):
        return []
    report = os.path.join(run_dir, "report.html")
    return [
        run_summary(trace_file, settings.run_id, threshold, peak_flops, reports),
        f"traces: {trace_file}  (view a step: spanspec view {trace_file})",
        f"report: spanspec report {run_dir} -o {report}",
    ]


def _read(spans: Iterable[Any], collector: Any, run_id: str | None, folds: list[Any]) -> None:
    """Feed ``spans`` to ``collector`` (a StepCollector: it keeps ``run_id``'s) and to each of
    ``folds`` those of ``run_id`` (all without one), then close the last steps."""
    run_key = collector.run_key
    for span in spans:
        collector.add(span)
        if folds and (run_id is None or span.resource.get(run_key) == run_id):
            for fold in folds:
                fold.add(span)
    collector.finish()


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
    """Where the async-GRPO collector's time went, and how much of its work (generation and
    reward) ran while the trainer was busy in a step: spanspec's overlap figure
    (:mod:`spanspec.traces.overlap`), the one ``spanspec report`` shows per step."""

    span_s: float
    """From the collector's first span's start to its last span's end."""
    phases: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (count, total s)
    overlap: Overlap = field(default_factory=Overlap)
    """Over the steps: the collector's productive time inside them, of it while the trainer was
    busy (not waiting for trajectories), and the trainer's wait."""

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
        lines.append("  " + self.overlap.line("collector work during steps", "the trainer"))
        return "\n".join(lines)


class CollectorFold:
    """The :class:`CollectorBreakdown` as a fold (a :class:`SummaryFold`): ``add`` each span,
    ``add_step`` each step, ``result()``; it keeps the collector's phase totals and the overlap
    sum, never the spans. ``spec`` is nemo_rl's registry (loaded when not given)."""

    follows_links = True

    def __init__(self, spec: spanspec.Spec | None = None) -> None:
        from spanspec.registry import load

        self.spec = spec or load()
        self.phases: dict[str, tuple[int, float]] = {}
        self.first: int | None = None
        self.last: int | None = None
        self.overlap = Overlap()

    def add(self, span: Any) -> None:
        """Count ``span`` if it is one of the collector's phases."""
        if span.name not in COLLECTOR_PHASES:
            return
        a = span.start_time_unix_nano
        b = max(a, span.end_time_unix_nano)
        count, total = self.phases.get(span.name, (0, 0.0))
        self.phases[span.name] = (count + 1, total + (b - a) / 1e9)
        self.first = a if self.first is None else min(self.first, a)
        self.last = b if self.last is None else max(self.last, b)

    def add_step(
        self, step: Any, members: list[Any], linked: Callable[[], tuple[list[Any], list[Any]]]
    ) -> None:
        """Add the step's overlap figure (:func:`spanspec.traces.overlap.step_overlap`)."""
        self.overlap += step_overlap(step, members, *linked(), self.spec)

    def result(self) -> CollectorBreakdown:
        """The :class:`CollectorBreakdown` of what was added (an empty one without collector
        spans)."""
        if self.first is None or self.last is None:
            return CollectorBreakdown(0.0)
        return CollectorBreakdown(
            span_s=(self.last - self.first) / 1e9, phases=dict(self.phases), overlap=self.overlap
        )

    def __str__(self) -> str:
        return str(self.result())


def compute_collector_breakdown(
    spans: Iterable[object], spec: spanspec.Spec | None = None, run_id: str | None = None
) -> CollectorBreakdown:
    """The collector's phases (count, total seconds) and the overlap figure of
    :func:`spanspec.traces.overlap.run_overlap` (each step's links lead to the rollouts it
    trained on, hence to the collector's lane), from span records as :func:`compute_breakdown`
    takes them (a sequence in any order, or a stream in end order), of ``run_id`` only when
    given; ``spec`` is nemo_rl's registry (loaded when not given)."""
    from spanspec.traces.steps import StepCollector

    fold = CollectorFold(spec)
    if isinstance(spans, Sequence):
        spans = sorted(spans, key=lambda s: s.end_time_unix_nano)

    def on_step(_times: Any, step: Any, members: list[Any]) -> None:
        fold.add_step(step, members, lambda: collector.linked(step, members))

    collector = StepCollector(fold.spec, run_id, on_step=on_step, keep_linked=True)
    _read(spans, collector, run_id, [fold])
    return fold.result()


def collector_breakdown(
    trace_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    run_id: str | None = None,
) -> CollectorBreakdown:
    """Read ``traces.jsonl`` file(s) once and return the :class:`CollectorBreakdown` (of
    ``run_id`` only, when given). At the end of a run the entry point folds the same table into
    :func:`run_summary`'s pass instead (:class:`CollectorFold`)."""
    from spanspec.traces import otlp_json

    return compute_collector_breakdown(otlp_json.TraceStream(trace_files).merged(), run_id=run_id)
