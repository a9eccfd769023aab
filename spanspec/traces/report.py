"""A run's steps as one self-contained HTML page: breakdown chart, step picker, waterfall.

``spanspec report PATH -o report.html`` calls :func:`write_report`. PATH is a ``traces.jsonl``,
the folder holding it, or a run folder above it. The page needs no network (no CDN, no fonts, no
images: inline CSS, SVG and a small script) and works opened from disk. It shows:

- the step-time breakdown (phases, mean seconds, share, bucket) and the buckets as a bar, as
  printed at the end of a run (:mod:`spanspec.traces.breakdown`);
- every step as a bar split by bucket; clicking one, or the step picker, shows that step;
- the picked step's waterfall with one lane per process (the main one, each worker), a span's
  attributes on click;
- the slowest steps.

All numbers are computed here, in Python, and embedded as JSON; the script only draws them. What a
step, a run and a lane are, and what the header shows, are the registry's ``conventions``.
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from spanspec.spec import Spec
from spanspec.traces.breakdown import Breakdown, compute_breakdown
from spanspec.traces.otlp_json import TRACE_FILE, SpanRecord, read_traces, trace_files
from spanspec.traces.ranks import compute_ranks, heat_map_html, pick_phase
from spanspec.traces.timeline import lane_of, lanes, pack_tracks

__all__ = ["ReportError", "find_trace_files", "render_report", "report_data", "write_report"]

SLOWEST = 5


class ReportError(Exception):
    """Bad input for a report: one line saying what and where."""


def find_trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files PATH names (see :func:`spanspec.traces.otlp_json.trace_files`).

    Raises:
        ReportError: when PATH does not exist, holds no trace file, or cannot be looked into.
    """
    p = Path(path)
    if not p.exists():
        raise ReportError(f"{p}: no such file or folder (expected a {TRACE_FILE} or a run folder)")
    files, problems = trace_files(p)
    if problems:
        raise ReportError(str(problems[0]))
    return files


def _run_ids(spans: Sequence[SpanRecord], key: str | None) -> list[str]:
    """The runs in the spans (the ``key`` resource attribute), the earliest first."""
    first: dict[str, int] = {}
    for s in spans if key else ():
        rid = s.resource.get(key)
        if isinstance(rid, str):
            first[rid] = min(first.get(rid, s.start_time_unix_nano), s.start_time_unix_nano)
    return sorted(first, key=first.__getitem__)


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
            }
            for p in b.phases
        ],
        "buckets": b.buckets,
    }


def _value(v: Any) -> Any:
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    return json.loads(json.dumps(v, default=str))


def report_data(
    spans: Sequence[SpanRecord],
    spec: Spec,
    run_id: str | None = None,
    title: str | None = None,
    straggler_threshold: float | None = None,
) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data.

    With several runs in the spans (a folder appended to by a resumed or repeated run), only
    ``run_id``'s spans count, by default the latest run's. Runs, steps, lanes and the header's
    resource attributes are the registry's ``conventions`` (``run_attribute``, ``step_span``,
    ``step_attribute``, ``lane_attributes``, ``report_attributes``).

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
    runs = _run_ids(spans, run_key)
    if run_id is None and runs:
        run_id = runs[-1]
    if run_id is not None:
        if run_key is None:
            raise ReportError(
                f"run id {run_id!r}: the registry names no run attribute "
                "(conventions.run_attribute), so runs cannot be told apart"
            )
        if run_id not in runs:
            raise ReportError(f"run id {run_id!r} is not in the files; runs: {', '.join(runs)}")
        spans = [s for s in spans if s.resource.get(run_key) == run_id]
    breakdown = compute_breakdown(spans, spec)

    children: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        if s.parent_span_id:
            children[s.parent_span_id].append(s)
    all_lanes = lanes(spans, conventions)
    lane_index = {lane.key: i for i, lane in enumerate(all_lanes)}

    def bucket_of(name: str) -> str | None:
        entry = spec.spans.get(name)
        return spec.groups[entry.group].bucket if entry else None

    steps = []
    step_span = conventions.step_span
    step_names = spec.spans_of_template(step_span) if step_span else frozenset()
    step_spans = [s for s in spans if s.name in step_names]
    for step in sorted(step_spans, key=lambda s: s.start_time_unix_nano):
        members = [step]
        stack = [step]
        seen = {step.span_id}  # each span once, even where parent links loop
        while stack:
            for child in children.get(stack.pop().span_id, []):
                if child.span_id not in seen:
                    seen.add(child.span_id)
                    members.append(child)
                    stack.append(child)
        per_lane: dict[int, list[SpanRecord]] = defaultdict(list)
        for s in members:
            per_lane[lane_index[lane_of(s.resource, conventions).key]].append(s)
        rows = []
        for lane, lane_spans in per_lane.items():
            # One row per (track, depth): nested spans stack downwards, as in a flame graph.
            tracks = pack_tracks(lane_spans)
            depth = defaultdict(int)
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
                        "parent_span_id": s.parent_span_id,
                    }
                )
        rows.sort(key=lambda r: (r["lane"], r["row"], r["start_ms"]))
        one = compute_breakdown(members, spec)
        number = conventions.step_attribute
        iteration = step.attributes.get(number) if number else None
        steps.append(
            {
                "name": step.name,
                "iteration": iteration if isinstance(iteration, int) else len(steps),
                "trace_id": step.trace_id,
                "dur_ms": step.duration_ns / 1e6,
                "start_unix_nano": step.start_time_unix_nano,
                "buckets": {b: share * step.duration_ns / 1e6 for b, share in one.buckets.items()},
                "spans": rows,
            }
        )
    slowest = sorted(range(len(steps)), key=lambda i: -steps[i]["dur_ms"])[:SLOWEST]
    header: dict[str, Any] = {}
    for key in conventions.report_attributes:  # the first process that carries it
        value = next((s.resource[key] for s in spans if s.resource.get(key) is not None), None)
        if value is not None:
            header[key] = _value(value)
    return {
        "title": title or f"run {run_id or 'unknown'}",
        "run_id": run_id,
        "runs": runs,
        "service": spans[0].resource.get("service.name") if spans else None,
        "header": header,
        "span_count": len(spans),
        "lanes": [lane.label for lane in all_lanes],
        "breakdown": _breakdown_json(breakdown),
        "steps": steps,
        "slowest": slowest,
        "ranks": _ranks_json(spans, spec, straggler_threshold),
    }


def _ranks_json(spans: Sequence[SpanRecord], spec: Spec, threshold: float | None) -> dict[str, Any]:
    ranks = compute_ranks(spans, spec, **({"threshold": threshold} if threshold else {}))
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
        "html": heat_map_html(ranks),
    }


def render_report(data: dict[str, Any]) -> str:
    """The HTML page for :func:`report_data`'s data (the template is package data)."""
    template = (
        resources.files("spanspec.traces").joinpath("report_template.html").read_text("utf-8")
    )
    ranks = data.get("ranks", {}).get("html", "")
    if ranks:  # drawn once, as HTML, not again inside the JSON
        data = {**data, "ranks": {k: v for k, v in data["ranks"].items() if k != "html"}}
    # Inside <script>, "</" could end the element early; "<\\/" means the same in JSON.
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
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
    straggler_threshold: float | None = None,
) -> dict[str, Any]:
    """Read the traces PATH names, write the HTML report to ``out``; return the report's data.

    ``spec`` is the registry, or a function that chooses it from the spans read (the CLI looks
    for the registry the run recorded), by default the discovered registry.

    Returns:
        The data the page shows (see :func:`report_data`), plus ``files``.

    Raises:
        ReportError: for a missing path, no trace file, unreadable lines, an unknown run id, or
            no spans at all.
    """
    files = find_trace_files(path)
    read = read_traces(files)
    bad = [f for f in read.findings if f.level == "violation"]
    if bad:
        raise ReportError(str(bad[0]))
    if not read.spans:
        raise ReportError(f"{files[0]}: the file holds no spans")
    if callable(spec):
        spec = spec(read.spans)
    data = report_data(
        read.spans, spec or _load(), run_id=run_id, straggler_threshold=straggler_threshold
    )
    data["files"] = [str(f) for f in files]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(render_report(data), encoding="utf-8")
    return data


def _load() -> Spec:
    from spanspec.registry import load

    return load()
