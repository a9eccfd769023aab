"""A text waterfall of one trace: each span indented by depth, a bar on the trace's time axis.

    pipeline.batch                       [██████████████████████████████]  812.4 ms
      pipeline.load                      [███████████                   ]  301.0 ms
      pipeline.transform                 [           ██████████         ]  290.2 ms

Spans whose parent is not in the file are drawn as roots. ``spanspec view`` picks the first trace
whose root is a step span (the registry's ``conventions.step_span``) unless told a trace id or a
step (``conventions.step_attribute``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spanspec.spec import Conventions
from spanspec.traces.otlp_json import SpanRecord

__all__ = ["TraceSummary", "render_waterfall", "select_trace", "traces"]


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
    summaries: Sequence[TraceSummary],
    trace_id: str | None = None,
    step: int | None = None,
    conventions: Conventions | None = None,
) -> TraceSummary:
    """Pick a trace: by id (a unique prefix is enough), by the step number (the subtree of that
    step span when it is not the trace's root), or the first whose root is a step span (else
    the first trace). What a step span is and which attribute numbers it are the registry's
    ``conventions`` (``step_span``, ``step_attribute``).

    Returns:
        The chosen trace.

    Raises:
        LookupError: with a one-line reason (and the available choices) when nothing matches,
            or when a step is asked for and the conventions name no step span or attribute.
    """
    conventions = conventions or Conventions()
    is_step = conventions.is_step_span
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
    steps = [t for t in summaries if any(is_step(n) for n in t.root_names)]
    if step is not None:
        number = conventions.step_attribute
        if conventions.step_span is None or number is None:
            raise LookupError(
                "the registry names no step span and step attribute (conventions.step_span, "
                "conventions.step_attribute): pick a trace with --trace ID"
            )
        # A step is usually a root (per_step); under a job span (all, default) it is drawn as
        # the subtree below that step span.
        found_steps = [
            (t, s)
            for t in summaries
            for s in t.spans
            if is_step(s.name) and isinstance(s.attributes.get(number), int)
        ]
        for t, s in found_steps:
            if s.attributes[number] == step:
                return t if s in t.roots and len(t.roots) == 1 else _subtree(t, s)
        seen = sorted({s.attributes[number] for _, s in found_steps})
        listed = ", ".join(map(str, seen[:20])) or "none"
        raise LookupError(f"no step span with {number}={step}; steps in the files: {listed}")
    return steps[0] if steps else summaries[0]


def _root_label(root: SpanRecord, conventions: Conventions | None) -> str:
    """A root's name, with its step number when it is a step span."""
    if conventions is None or not conventions.is_step_span(root.name):
        return root.name
    number = root.attributes.get(conventions.step_attribute or "")
    return root.name if number is None else f"{root.name} ({conventions.step_attribute}={number})"


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
    trace: TraceSummary,
    width: int = 40,
    bar: str = "█",
    name_width: int | None = None,
    conventions: Conventions | None = None,
) -> str:
    """Return the trace as text: a header line, then one line per span in start order by depth.

    ``width`` is the bar's length in characters for the whole trace; ``bar`` the fill character
    (use ``#`` where the output cannot take Unicode). Error spans end with ``ERROR``. With the
    registry's ``conventions``, a root that is a step span is named with its number in the
    header (``pipeline.batch (pipeline.batch.index=3)``).
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
        f"trace {trace.trace_id}  {', '.join(_root_label(r, conventions) for r in trace.roots)}  "
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
