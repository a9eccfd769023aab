"""A text waterfall of one trace: each span indented by depth, a bar on the trace's time axis.

    rl.grpo.step                         [██████████████████████████████]  812.4 ms
      rl.grpo.generation                 [███████████                   ]  301.0 ms
        rl.worker.generate               [ ██████████                   ]  290.2 ms

Spans whose parent is not in the file are drawn as roots. ``spanspec view`` picks the first trace
whose root is an ``rl.<algorithm>.step``-like span (``*.step``) unless told a trace id or a step.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spanspec.traces.otlp_json import SpanRecord

__all__ = ["STEP_PATTERN", "TraceSummary", "render_waterfall", "select_trace", "traces"]

STEP_PATTERN = "rl.*.step"
ITERATION_ATTRIBUTE = "rl.iteration"


@dataclass(frozen=True)
class TraceSummary:
    """One trace in a file: its id, root span names, span count and time bounds."""

    trace_id: str
    roots: tuple[SpanRecord, ...]
    spans: tuple[SpanRecord, ...]
    start: int
    end: int

    @property
    def root_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roots)


def traces(spans: Iterable[SpanRecord]) -> list[TraceSummary]:
    """Group spans by trace, in order of each trace's start time."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    out = []
    for trace_id, members in by_trace.items():
        ids = {s.span_id for s in members}
        roots = sorted(
            (s for s in members if not s.parent_span_id or s.parent_span_id not in ids),
            key=lambda s: s.start_time_unix_nano,
        )
        out.append(
            TraceSummary(
                trace_id,
                tuple(roots),
                tuple(members),
                min(s.start_time_unix_nano for s in members),
                max(s.end_time_unix_nano for s in members),
            )
        )
    return sorted(out, key=lambda t: t.start)


def select_trace(
    summaries: Sequence[TraceSummary], trace_id: str | None = None, step: int | None = None
) -> TraceSummary:
    """Pick a trace: by id (a unique prefix is enough), by the step's ``rl.iteration`` (the
    subtree of that step span when it is not the trace's root), or the first whose root matches
    :data:`STEP_PATTERN` (else the first trace).

    Raises:
        LookupError: with a one-line reason (and the available choices) when nothing matches.
    """
    if not summaries:
        raise LookupError("the files hold no spans")
    if trace_id is not None:
        wanted = trace_id.lower()
        found = [t for t in summaries if t.trace_id.startswith(wanted)]
        if len(found) == 1:
            return found[0]
        listed = ", ".join(f"{t.trace_id[:12]} ({'/'.join(t.root_names)})" for t in summaries[:5])
        more = f" and {len(summaries) - 5} more" if len(summaries) > 5 else ""
        why = "matches several traces" if found else "matches no trace"
        raise LookupError(f"trace id {trace_id!r} {why}; traces: {listed}{more}")
    steps = [
        t for t in summaries if any(fnmatch.fnmatchcase(n, STEP_PATTERN) for n in t.root_names)
    ]
    if step is not None:
        # A step is usually a root (per_step); under a job span (all, default) it is drawn as
        # the subtree below that step span.
        found_steps = [
            (t, s)
            for t in summaries
            for s in t.spans
            if fnmatch.fnmatchcase(s.name, STEP_PATTERN)
            and isinstance(s.attributes.get(ITERATION_ATTRIBUTE), int)
        ]
        for t, s in found_steps:
            if s.attributes[ITERATION_ATTRIBUTE] == step:
                return t if s in t.roots and len(t.roots) == 1 else _subtree(t, s)
        seen = sorted({s.attributes[ITERATION_ATTRIBUTE] for _, s in found_steps})
        listed = ", ".join(map(str, seen[:20])) or "none"
        raise LookupError(
            f"no step span with {ITERATION_ATTRIBUTE}={step}; steps in the files: {listed}"
        )
    return steps[0] if steps else summaries[0]


def _subtree(trace: TraceSummary, root: SpanRecord) -> TraceSummary:
    """The part of ``trace`` at and below ``root``."""
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in trace.spans:
        if s.parent_span_id:
            children[s.parent_span_id].append(s)
    members: list[SpanRecord] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        members.append(node)
        stack.extend(children.get(node.span_id, []))
    return TraceSummary(
        trace.trace_id,
        (root,),
        tuple(members),
        root.start_time_unix_nano,
        max(s.end_time_unix_nano for s in members),
    )


def render_waterfall(
    trace: TraceSummary, width: int = 40, bar: str = "█", name_width: int | None = None
) -> str:
    """Return the trace as text: a header line, then one line per span in start order by depth.

    ``width`` is the bar's length in characters for the whole trace; ``bar`` the fill character
    (use ``#`` where the output cannot take Unicode). Error spans end with ``ERROR``.
    """
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in trace.spans:
        if s.parent_span_id:
            children[s.parent_span_id].append(s)
    rows: list[tuple[int, SpanRecord]] = []
    drawn: set[int] = set()
    # Depth-first, iteratively; spans not reached from a root (a broken parent chain, repeated
    # ids) are drawn as roots afterwards, so every span appears exactly once.
    for root in (*trace.roots, *trace.spans):
        stack = [(0, root)]
        while stack:
            depth, node = stack.pop()
            if id(node) in drawn:
                continue
            drawn.add(id(node))
            rows.append((depth, node))
            kids = sorted(children.get(node.span_id, []), key=lambda s: s.start_time_unix_nano)
            stack.extend((depth + 1, k) for k in reversed(kids))

    total = max(1, trace.end - trace.start)
    label_width = name_width or max(len("  " * d + s.name) for d, s in rows)
    header = (
        f"trace {trace.trace_id}  {', '.join(trace.root_names)}  "
        f"{total / 1e6:.1f} ms, {len(trace.spans)} spans"
    )
    lines = [header]
    for depth, s in rows:
        first = int((s.start_time_unix_nano - trace.start) * width / total)
        last = int((s.end_time_unix_nano - trace.start) * width / total)
        first = min(max(first, 0), width - 1)
        length = max(1, min(last, width) - first)
        cells = " " * first + bar * length + " " * (width - first - length)
        label = "  " * depth + s.name
        marker = "  ERROR" if s.is_error else ""
        lines.append(f"{label:<{label_width}}  [{cells}] {s.duration_ns / 1e6:8.1f} ms{marker}")
    return "\n".join(lines)
