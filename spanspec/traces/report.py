"""A run's steps as one self-contained HTML page: breakdown chart, step picker, waterfall.

``spanspec report PATH -o report.html`` calls :func:`write_report`. PATH is a ``traces.jsonl``,
the folder holding it, or a run folder above it. The page needs no network (no CDN, no fonts, no
images: inline CSS, SVG and a small script) and works opened from disk. It shows:

- the step-time breakdown (phases, mean seconds, share, bucket) and the buckets as a bar, as
  printed at the end of a run (:mod:`spanspec.traces.breakdown`);
- every step as a bar split by bucket; clicking one, or the step picker, shows that step;
- the picked step's waterfall with one lane per process (the main one, each worker), a span's
  attributes on click;
- the slowest steps;
- the run's metric curves per step (reward, loss, ...: :mod:`spanspec.traces.curves`), from the
  metrics file next to the traces, each titled with its logged key and linked to the step picker.

All numbers are computed here, in Python, and embedded as JSON; the script only draws them. What a
step, a run and a lane are, and what the header shows, are the registry's ``conventions``.
"""

from __future__ import annotations

import heapq
import html
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from spanspec._text import script_json
from spanspec.files import PointerError, write_atomically
from spanspec.spec import TRUNCATED_ATTRIBUTE, Spec
from spanspec.traces.breakdown import Breakdown, BreakdownFold
from spanspec.traces.curves import find_metrics_file, metric_curves, read_rows, step_offset
from spanspec.traces.otlp_json import SpanRecord, TraceStream, existing_trace_files
from spanspec.traces.overlap import Overlap, step_overlap
from spanspec.traces.ranks import RankFold, RankReport, heat_map_html, pick_phase
from spanspec.traces.steps import StepCollector, StepTimes, latest_run
from spanspec.traces.timeline import lane_of, pack_tracks

__all__ = ["ReportError", "find_trace_files", "render_report", "report_data", "write_report"]

SLOWEST = 5


class ReportError(Exception):
    """Bad input for a report: one line saying what and where."""


def find_trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files PATH names (see :func:`spanspec.traces.otlp_json.trace_files`).

    Raises:
        ReportError: when PATH does not exist, holds no trace file, or cannot be looked into.
    """
    try:
        return existing_trace_files(path)
    except ValueError as exc:
        raise ReportError(str(exc)) from None


def _breakdown_json(b: Breakdown) -> dict[str, Any]:
    return {
        "steps": b.steps,
        "mean_step_s": b.mean_step_s,
        "phases": [
            {
                "name": p.name,
                "depth": p.depth,
                "mean_s": p.mean_s,
                "share": p.share,
                "bucket": p.bucket,
                "count": p.count,
                "steps_with": p.steps_with,
                "each_s": p.each_s,
                "cpu_per_wall": p.cpu_per_wall,
            }
            for p in b.phases
        ],
        "buckets": b.buckets,
    }


def _value(v: Any) -> Any:
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    return json.loads(json.dumps(v, default=str))


WATERFALLS_FIRST = 20
"""The page holds the waterfall of a run's first steps..."""
WATERFALLS_SLOWEST = 30
"""...and of its slowest steps; every other step is a bar (``spanspec view --step N`` draws it)."""
STEP_BARS = 5_000
"""A run of more steps has a bar for every k-th of them (k doubling as the run grows, between
STEP_BARS and twice that many bars), and one for each step whose waterfall is kept; the
breakdown, the mean and the slowest steps are still of every step (``steps_total``)."""


class _RunPage:
    """What the page keeps of one run while the spans stream by: aggregates, and the waterfall
    rows of a bounded set of steps (the first ones and the slowest)."""

    def __init__(self, first_start: int, ranks: RankFold, rid: str | None = None) -> None:
        self.rid = rid
        self.first_start = first_start
        self.missed = False  # steps of the run went by while another run was followed
        self.reset(ranks)
        self.span_count = 0
        self.lanes: dict[Any, Any] = {}
        self.header: dict[str, Any] = {}
        self.service: Any = None

    def reset(self, ranks: RankFold) -> None:
        """Let the steps go (another run is followed now)."""
        self.ranks = ranks
        self.steps: dict[int, dict[str, Any]] = {}  # every ``every``-th, those with a waterfall
        self.count = 0  # every step
        self.every = 1
        self.total_ms = 0.0
        self.breakdown = BreakdownFold()
        self.rows: dict[int, list[dict[str, Any]]] = {}
        self.slow: list[tuple[float, int]] = []  # heap of (duration, step index) kept as slowest
        self.overlap = Overlap()  # of the steps with links: the linked work while they were busy


class _Repass(Exception):
    """The run shown is not the one followed while reading: read again for ``run_id``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


def report_data(
    spans: Iterable[SpanRecord],
    spec: Spec,
    run_id: str | None = None,
    title: str | None = None,
    straggler_threshold: float | None = None,
) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data, folded over the spans in one pass.

    ``spans`` is a sequence (any order) or a stream in end order
    (:meth:`~spanspec.traces.otlp_json.TraceStream.merged`). With several runs in the spans (a
    folder appended to by a resumed or repeated run), only ``run_id``'s spans count, by default
    the latest run's. Runs, steps, lanes and the header's resource attributes are the registry's
    ``conventions`` (``run_attribute``, ``step_span``, ``step_attribute``, ``lane_attributes``,
    ``report_attributes``). Every step is in ``steps`` (its time and buckets), up to
    :data:`STEP_BARS` (past them, every ``steps_every``-th of ``steps_total``); the spans of its
    waterfall only for the first :data:`WATERFALLS_FIRST` and the :data:`WATERFALLS_SLOWEST`
    slowest steps of the run (``kept``), so the page and the memory stay bounded on long runs.

    Returns:
        The page's data: ``run_id``, ``runs``, ``header`` (resource attribute -> value),
        ``lanes``, ``breakdown``, ``steps``, ``slowest``, ``ranks`` (the heat map of lanes x
        steps of the most skewed worker phase, and a line per straggler; see
        :mod:`spanspec.traces.ranks`)...

    Raises:
        ReportError: when ``run_id`` is not in the spans, or the registry names no run attribute.
    """
    conventions = spec.conventions
    run_key = conventions.run_attribute
    if run_id is not None and run_key is None:
        raise ReportError(
            f"run id {run_id!r}: the registry names no run attribute "
            "(conventions.run_attribute), so runs cannot be told apart"
        )
    held: Iterable[SpanRecord] | None = None
    if isinstance(spans, Sequence):  # held in memory: put it in the order a stream has
        spans = held = sorted(spans, key=lambda s: s.end_time_unix_nano)
    pages: dict[str | None, _RunPage] = {}
    # Only one run's steps are kept: the one asked for, else the latest so far (the one shown
    # unless an earlier span of another run turns up later: then it is read again).
    focus: list[str | None] = [run_id]

    def new_ranks() -> RankFold:
        return RankFold(spec, *_threshold(straggler_threshold))

    def rank(page: _RunPage) -> tuple[bool, int, str]:
        return (page.rid is not None, page.first_start, page.rid or "")

    def page_of(resource: Any, start: int) -> _RunPage:
        rid = resource.get(run_key) if run_key else None
        rid = rid if isinstance(rid, str) else None
        page = pages.get(rid)
        if page is None:
            page = pages[rid] = _RunPage(start, new_ranks(), rid)
        page.first_start = min(page.first_start, start)
        if run_id is None and rid != focus[0]:
            followed = pages.get(focus[0])
            if followed is None or rank(page) > rank(followed):
                if followed is not None and followed.steps:
                    followed.reset(new_ranks())
                    followed.missed = True
                focus[0] = rid
        return page

    def bucket_of(name: str) -> str | None:
        entry = spec.spans.get(name)
        return spec.groups[entry.group].bucket if entry else None

    def on_step(times: StepTimes, step: SpanRecord, members: list[SpanRecord]) -> None:
        page = page_of(step.resource, step.start_time_unix_nano)
        if page.rid != focus[0]:
            page.missed = True
            return
        index = page.count
        page.count += 1
        page.total_ms += step.duration_ns / 1e6
        page.breakdown.add(times)
        targets, shown = collector.linked(step, members)
        overlap = step_overlap(step, members, targets, shown, spec)
        page.overlap += overlap
        bar = {
            "index": index,
            "name": step.name,
            "iteration": times.iteration if times.iteration is not None else index,
            "trace_id": step.trace_id,
            "dur_ms": step.duration_ns / 1e6,
            "start_unix_nano": step.start_time_unix_nano,
            "buckets": {b: v * 1e3 for b, v in times.buckets.items()},
            "spans": [],
            "kept": False,
            "folded": times.folded,  # spans counted in its times, not held to be drawn
            # ended by the shutdown, not by its code (a stopped run): its time is partial
            "truncated": step.attributes.get(TRUNCATED_ATTRIBUTE) is True,
            "links": _links(members, targets, conventions),
            "overlap": overlap.to_json() if overlap.steps else None,
        }
        keep = index < WATERFALLS_FIRST
        if not keep:
            entry = (step.duration_ns / 1e6, index)
            if len(page.slow) < WATERFALLS_SLOWEST:
                heapq.heappush(page.slow, entry)
                keep = True
            elif entry > page.slow[0]:
                _, out = heapq.heapreplace(page.slow, entry)
                page.rows.pop(out, None)
                if out >= WATERFALLS_FIRST and out % page.every:
                    page.steps.pop(out, None)  # its bar was there for its waterfall only
                keep = True
        if keep:
            linked = {t.span_id for t in targets}
            page.rows[index] = _waterfall(step, [*members, *shown], conventions, bucket_of)
            for row in page.rows[index]:
                row["linked"] = row["span_id"] in linked  # a span this step's links point at
                row["other_trace"] = row["trace_id"] != step.trace_id
        if keep or index % page.every == 0:
            page.steps[index] = bar
            if len(page.steps) > 2 * STEP_BARS:  # a bar for every other one of them
                page.every *= 2
                page.steps = {
                    i: b for i, b in page.steps.items() if i % page.every == 0 or i in page.rows
                }
        page.ranks.add(step, members)

    collector = StepCollector(spec, on_step=on_step, keep_linked=True)
    for s in spans:
        page = page_of(s.resource, s.start_time_unix_nano)
        page.span_count += 1
        if page.service is None:
            page.service = s.resource.get("service.name")
        lane = lane_of(s.resource, conventions)
        page.lanes.setdefault(lane.key, lane)
        for key in conventions.report_attributes:  # the first process that carries it
            if key not in page.header and s.resource.get(key) is not None:
                page.header[key] = _value(s.resource[key])
        collector.add(s)
    collector.finish()

    firsts = {r: p.first_start for r, p in pages.items() if r is not None}
    runs = sorted(firsts, key=lambda r: (firsts[r], r))
    if run_id is None:
        run_id = latest_run(firsts)
    if run_id is not None and run_id not in runs:
        raise ReportError(f"run id {run_id!r} is not in the files; runs: {', '.join(runs)}")
    page = pages.get(run_id) or _RunPage(0, new_ranks())
    if page.missed:  # its steps went by while another run was followed
        if not isinstance(held, list):
            raise _Repass(str(run_id))
        return report_data(held, spec, run_id, title, straggler_threshold)
    all_lanes = sorted(page.lanes.values(), key=lambda lane: lane.order)
    lane_index = {lane.key: i for i, lane in enumerate(all_lanes)}
    steps = []
    for step in sorted(page.steps.values(), key=lambda b: b["start_unix_nano"]):
        rows = page.rows.get(step.pop("index"))
        if rows is not None:
            # (a linked span of another run, in a lane this run never had, is left out)
            rows = [r for r in rows if r["lane"] in lane_index]
            for row in rows:
                row["lane"] = lane_index[row["lane"]]
            rows.sort(key=lambda r: (r["lane"], r["row"], r["start_ms"]))
            step["spans"], step["kept"] = rows, True
        steps.append(step)
    # The slowest steps, and only those slower than the mean (a run of equal steps has none).
    mean_ms = page.total_ms / page.count if page.count else 0.0
    slower = [i for i in range(len(steps)) if steps[i]["dur_ms"] > mean_ms]
    slowest = sorted(slower, key=lambda i: -steps[i]["dur_ms"])[:SLOWEST]
    return {
        "title": title or f"run {run_id or 'unknown'}",
        "run_id": run_id,
        "runs": runs,
        "service": page.service,
        "header": page.header,
        "span_count": page.span_count,
        "lanes": [lane.label for lane in all_lanes],
        "breakdown": _breakdown_json(page.breakdown.result(spec)),
        "steps": steps,
        "steps_total": page.count,
        "steps_every": page.every,
        "slowest": slowest,
        "waterfalls": {"first": WATERFALLS_FIRST, "slowest": WATERFALLS_SLOWEST},
        "ranks": _ranks_json(page.ranks.result()),
        "overlap": page.overlap.to_json() if page.overlap.steps else None,
    }


def _threshold(threshold: float | None) -> tuple[float, ...]:
    return (threshold,) if threshold else ()


def _ranks_json(ranks: RankReport) -> dict[str, Any]:
    picked = pick_phase(ranks)
    return {
        "phase": picked.phase if picked else None,
        "stragglers": [
            f"straggler: {s.lane} is {s.percent_slower:.0f}% slower than the median in {s.phase}, "
            f"the slowest in {s.slow_steps} of {s.steps} steps"
            for s in ranks.stragglers()
        ],
        "lost_s": ranks.lost_s,
        "peaks": ranks.peaks,
        "cpu": {
            phase: {lane: c / w for lane, (c, w) in lanes.items() if w > 0}
            for phase, lanes in ranks.cpu.items()
        },
        "html": heat_map_html(ranks),
    }


def _waterfall(
    step: SpanRecord,
    members: list[SpanRecord],
    conventions: Any,
    bucket_of: Callable[[str], str | None],
) -> list[dict[str, Any]]:
    """The rows of one step's waterfall (``lane`` is the lane key until the lanes are known)."""
    per_lane: dict[Any, list[SpanRecord]] = defaultdict(list)
    for s in members:
        per_lane[lane_of(s.resource, conventions).key].append(s)
    rows = []
    for lane, lane_spans in per_lane.items():
        # One row per (track, depth): nested spans stack downwards, as in a flame graph.
        tracks = pack_tracks(lane_spans)
        depth: dict[int, int] = defaultdict(int)
        for track, d in tracks.values():
            depth[track] = max(depth[track], d + 1)
        offset = {t: sum(depth[u] for u in depth if u < t) for t in depth}
        for s in lane_spans:
            track, d = tracks[id(s)]
            rows.append(
                {
                    "name": s.name,
                    "lane": lane,
                    "row": offset[track] + d,
                    "start_ms": (s.start_time_unix_nano - step.start_time_unix_nano) / 1e6,
                    "dur_ms": s.duration_ns / 1e6,
                    "bucket": bucket_of(s.name),
                    "error": s.is_error,
                    "attributes": {k: _value(v) for k, v in s.attributes.items()},
                    "span_id": s.span_id,
                    "trace_id": s.trace_id,
                    "parent_span_id": s.parent_span_id,
                }
            )
    return rows


def _links(
    members: list[SpanRecord], targets: list[SpanRecord], conventions: Any
) -> list[dict[str, Any]]:
    """Every link of the step's spans: from which span, to which (its name, duration and lane
    when the files hold it, else None)."""
    found = {(t.trace_id, t.span_id): t for t in targets}
    out = []
    for s in members:
        for link in s.links:
            target = found.get((link.trace_id, link.span_id))
            out.append(
                {
                    "from": s.name,
                    "from_span_id": s.span_id,
                    "trace_id": link.trace_id,
                    "span_id": link.span_id,
                    "attributes": {k: _value(v) for k, v in link.attributes.items()},
                    "name": target.name if target else None,
                    "dur_ms": target.duration_ns / 1e6 if target else None,
                    "lane": lane_of(target.resource, conventions).label if target else None,
                }
            )
    return out


def render_report(data: dict[str, Any]) -> str:
    """The HTML page for :func:`report_data`'s data (the template is package data)."""
    template = (
        resources.files("spanspec.traces").joinpath("report_template.html").read_text("utf-8")
    )
    ranks = data.get("ranks", {}).get("html", "")
    if ranks:  # drawn once, as HTML, not again inside the JSON
        data = {**data, "ranks": {k: v for k, v in data["ranks"].items() if k != "html"}}
    # Inside <script> no string may end the element or open a comment: see script_json.
    payload = script_json(data)
    return (
        template.replace("{{TITLE}}", html.escape(str(data["title"])))
        .replace("{{RANKS}}", ranks)
        .replace("{{DATA}}", payload)
    )


def write_report(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: Spec | Callable[[Sequence[SpanRecord]], Spec] | None = None,
    run_id: str | None = None,
    baseline: str | os.PathLike[str] | None = None,
    metrics_file: str | os.PathLike[str] | None = None,
    straggler_threshold: float | None = None,
) -> dict[str, Any]:
    """Read the traces PATH names, write the HTML report to ``out``; return the report's data.

    ``spec`` is the registry, or a function that chooses it from the spans read (the CLI looks
    for the registry the run recorded), by default the discovered registry. With ``baseline``
    (another run), the page adds the comparison of ``spanspec diff`` (this run the candidate),
    both runs' step times on one chart, and the baseline's run id (``data["baseline"]``).
    ``metrics_file`` holds the run's logged scalars per step (default: the ``metrics.jsonl`` of
    step rows in PATH, next to the traces, or in the run folder the trace folder's run pointer
    names, if any; see :func:`~spanspec.traces.curves.find_metrics_file`): the page draws their
    curves (``curves``, ``metrics_file`` in the data).

    Returns:
        The data the page shows (see :func:`report_data`), plus ``files``.

    Raises:
        ReportError: for a missing path, no trace file, unreadable lines, an unknown run id, or
            no spans at all; for a run pointer that cannot be read or leads nowhere; for a
            baseline that ``spanspec diff`` refuses.
    """
    files = find_trace_files(path)
    first = next(iter(TraceStream(files)), None)
    if callable(spec):
        spec = spec([first] if first is not None else [])
    spec = spec or _load()
    stream = TraceStream(files)  # one pass: memory bounded by what the page keeps
    try:
        data = report_data(
            stream.merged(), spec, run_id=run_id, straggler_threshold=straggler_threshold
        )
    except _Repass as again:  # the run shown was not followed all along: read it alone
        stream = TraceStream(files)
        data = report_data(
            stream.merged(), spec, run_id=again.run_id, straggler_threshold=straggler_threshold
        )
    bad = [f for f in stream.findings if f.level == "violation"]
    if bad:
        raise ReportError(str(bad[0]))
    if not data["span_count"] and not data["runs"]:
        raise ReportError(f"{files[0]}: the file holds no spans")
    data["files"] = [str(f) for f in files]
    try:
        rows_file = (
            Path(metrics_file)
            if metrics_file
            else find_metrics_file(files, Path(path), data["run_id"])
        )
    except PointerError as exc:
        raise ReportError(str(exc)) from None
    if rows_file is not None and not rows_file.is_file():
        raise ReportError(f"{rows_file}: no such metrics file")
    data["metrics_file"] = str(rows_file) if rows_file else None
    data["curves"] = metric_curves(read_rows(rows_file), spec) if rows_file else []
    data["curve_step_offset"] = step_offset(data["curves"], (s["iteration"] for s in data["steps"]))
    if baseline is not None:
        data["baseline"] = _baseline(baseline, path, spec, data["run_id"])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, render_report(data))  # a full disk keeps the previous report
    return data


def _baseline(
    baseline: str | os.PathLike[str], path: str | os.PathLike[str], spec: Spec, run_id: str | None
) -> dict[str, Any]:
    """The comparison with a baseline run, as the page shows it."""
    from spanspec.traces.diff import DiffError, diff_runs, read_run

    try:
        base = read_run(baseline, spec)
        result = diff_runs(base, read_run(path, spec, run_id))
    except DiffError as exc:
        raise ReportError(f"--baseline: {exc}") from None
    out = result.to_json()
    return {
        "path": str(baseline),
        "run_id": base.run_id,
        "method": result.header().removeprefix("method: "),
        "rows": out["rows"],
        "slower": out["slower"],
        "steps": [
            {"iteration": it, "dur_ms": seconds * 1e3}
            for it, seconds in zip(base.iterations, base.samples[("step",)], strict=True)
        ],
    }


def _load() -> Spec:
    from spanspec.registry import load

    return load()
