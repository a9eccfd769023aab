"""A text waterfall of one trace: each span indented by depth, a bar on the trace's time axis.

    pipeline.batch                       [██████████████████████████████]  812.4 ms
      pipeline.load                      [███████████                   ]  301.0 ms
      pipeline.transform                 [           ██████████         ]  290.2 ms

Spans whose parent is not in the file are drawn as roots. ``spanspec view`` picks the first trace
whose root is a step span (the registry's ``conventions.step_span``) unless told a trace id or a
step (``conventions.step_attribute``).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spanspec.spec import Conventions
from spanspec.traces.fingerprints import Fingerprints
from spanspec.traces.otlp_json import SpanRecord
from spanspec.traces.steps import latest_run
from spanspec.traces.timeline import lane_of

__all__ = [
    "TraceSummary",
    "link_lines",
    "pick_run",
    "render_waterfall",
    "select_trace",
    "stream_traces",
    "traces",
]


@dataclass(frozen=True)
class TraceSummary:
    """One trace in a file: its id, root span names, span count and time bounds."""

    trace_id: str
    roots: tuple[SpanRecord, ...]
    spans: tuple[SpanRecord, ...]
    start: int
    end: int
    count: int = -1
    """How many spans the trace has (``len(spans)`` unless only its roots were kept)."""
    run_id: str | None = None
    """The run the trace belongs to (the registry's ``conventions.run_attribute``), if known."""
    partial: bool = False
    """A summary of a run whose traces went by while :func:`stream_traces` followed another:
    to draw one of them, stream the run's spans alone."""

    @property
    def span_count(self) -> int:
        """The trace's number of spans."""
        return self.count if self.count >= 0 else len(self.spans)

    @property
    def root_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roots)


def traces(spans: Iterable[SpanRecord], run_key: str | None = None) -> list[TraceSummary]:
    """Group spans by trace, in order of each trace's start time; with ``run_key`` (the
    conventions' run attribute) each summary names its run."""
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
                run_id=_run_of(members[0], run_key),
            )
        )
    return sorted(out, key=lambda t: t.start)


def _run_of(span: SpanRecord, run_key: str | None) -> str | None:
    value = span.resource.get(run_key) if run_key else None
    return value if isinstance(value, str) else None


def pick_run(summaries: Sequence[TraceSummary]) -> tuple[str | None, list[str]]:
    """The run to draw when none is asked for, by the rule ``spanspec report`` uses
    (:func:`spanspec.traces.steps.latest_run`: the run that started last), and every run of
    the summaries, earliest first.

    Returns:
        ``(run id or None, runs)``.
    """
    firsts: dict[str, int] = {}
    for t in summaries:
        if t.run_id is not None:
            firsts[t.run_id] = min(firsts.get(t.run_id, t.start), t.start)
    return latest_run(firsts), sorted(firsts, key=lambda r: (firsts[r], r))


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
        run_id=trace.run_id,
    )


def render_waterfall(
    trace: TraceSummary,
    width: int = 40,
    bar: str = "█",
    name_width: int | None = None,
    conventions: Conventions | None = None,
    run_id: str | None = None,
) -> str:
    """Return the trace as text: a header line, then one line per span in start order by depth.

    ``width`` is the bar's length in characters for the whole trace; ``bar`` the fill character
    (use ``#`` where the output cannot take Unicode). Error spans end with ``ERROR``. With the
    registry's ``conventions``, a root that is a step span is named with its number in the
    header (``pipeline.batch (pipeline.batch.index=3)``); with ``run_id``, the header ends with
    ``, run ID``.
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
        f"{total / 1e6:.1f} ms, {len(trace.spans)} spans" + (f", run {run_id}" if run_id else "")
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


def link_lines(
    trace: TraceSummary,
    targets: dict[tuple[str, str], SpanRecord],
    conventions: Conventions | None = None,
) -> list[str]:
    """The links of the drawn trace's spans, one line each, under a ``links:`` heading (none
    when no span links): the linking span (with its step number when it is a step span), the
    linked span's name, duration and lane when ``targets`` (``(trace id, span id)`` -> span)
    holds it, and its ids::

        links (1):
          pipeline.batch (pipeline.batch.index=3) <- pipeline.load  31.3 ms  loader 0  trace 5f0b... span 9c88...
    """
    rows = []
    for s in sorted(trace.spans, key=lambda s: s.start_time_unix_nano):
        for link in s.links:
            target = targets.get((link.trace_id, link.span_id))
            if target is None:
                what = "(not in the files)"
            else:
                lane = lane_of(target.resource, conventions).label
                what = f"{target.name}  {target.duration_ns / 1e6:.1f} ms  {lane}"
            extra = "".join(f"  {k}={v}" for k, v in link.attributes.items())
            rows.append(
                f"  {_root_label(s, conventions)} <- {what}  "
                f"trace {link.trace_id[:12]} span {link.span_id}{extra}"
            )
    return [f"links ({len(rows)}):", *rows] if rows else []


@dataclass
class _Trace:
    """What a streaming pick keeps of one trace: its body while it may still be drawn, else only
    its bounds, count, roots and step spans."""

    trace_id: str
    start: int
    end: int
    count: int = 0
    body: list[SpanRecord] | None = None
    marks: list[SpanRecord] | None = None  # parentless and step spans (for choosing, listing)
    first: SpanRecord | None = None  # the earliest span (a root when none is parentless)
    run_id: str | None = None
    rooted: bool = False  # a parentless span arrived


RETIRED_KEPT = 5
RETIRED_STEPS = 20
BODY_SPANS = 50_000
"""A trace that may be drawn holds at most this many spans (the first to end, and every
parentless one); the summary's ``count`` still says how many it has."""


class _Retired:
    """What ``stream_traces`` keeps of one run's traces it let go entirely: the earliest start,
    the :data:`RETIRED_KEPT` earliest traces, the :data:`RETIRED_STEPS` lowest step spans."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.earliest: list[tuple[int, int, TraceSummary]] = []  # heap of (-start, n, summary)
        self.steps: dict[int, SpanRecord] = {}  # step number -> a slim step span
        self.count = 0
        self.partial = False  # only the start and count: another run was followed
        self.late = 0  # spans of its let-go traces that came after their root

    def count_span(self, span: SpanRecord) -> None:
        """A span of a trace already let go, come late: counted in the run's summary."""
        self.late += 1
        self.start = min(self.start, span.start_time_unix_nano)

    def drop(self) -> None:
        """Keep only the start and count from now on."""
        self.partial = True
        self.earliest.clear()
        self.steps.clear()

    def add(self, t: _Trace, number: str | None, is_step: Any) -> None:
        self.count += 1
        self.start = min(self.start, t.start)
        if self.partial:
            return
        marks = tuple(t.marks or ())
        for m in marks:
            n = m.attributes.get(number) if number else None
            if is_step(m.name) and isinstance(n, int) and n not in self.steps:
                self.steps[n] = m
                if len(self.steps) > RETIRED_STEPS:
                    del self.steps[max(self.steps)]
        roots = tuple(sorted((m for m in marks if not m.parent_span_id),
                             key=lambda m: m.start_time_unix_nano))  # fmt: skip
        if not roots and t.first is not None:
            roots = (t.first,)
        entry = (-t.start, self.count, TraceSummary(
            t.trace_id, roots, marks or roots, t.start, t.end, t.count, run_id=t.run_id
        ))  # fmt: skip
        if len(self.earliest) < RETIRED_KEPT:
            heapq.heappush(self.earliest, entry)
        elif entry > self.earliest[0]:
            heapq.heapreplace(self.earliest, entry)

    def summaries(self, run_id: str | None) -> list[TraceSummary]:
        kept = [e[2] for e in self.earliest]
        steps = tuple(self.steps[n] for n in sorted(self.steps))
        stub = TraceSummary(
            "", (), steps, self.start, self.start, 0, run_id=run_id, partial=self.partial
        )
        return [*kept, stub]


def stream_traces(
    spans: Iterable[SpanRecord],
    trace_id: str | None = None,
    step: int | None = None,
    conventions: Conventions | None = None,
    keep_bodies: bool = True,
    run_key: str | None = None,
) -> list[TraceSummary]:
    """Group a stream of spans (in end order, as files are written) by trace, keeping the body
    (every span) only of the traces :func:`select_trace` could still pick with these arguments;
    the others become summaries of their roots and step spans. Memory is bounded by the traces
    in flight plus the one drawn, not by the file.

    A trace is let go once its parentless root arrives and shows it is not the one wanted: a
    trace id that does not match ``trace_id``; a step root of another number than ``step``; a
    step root starting later than the earliest one so far (no ``trace_id`` or ``step``); any
    non-step root once a step root is known. With ``keep_bodies`` False no body is kept (for
    listing). The summaries of let-go traces have ``spans`` of their roots and step spans only;
    their ``roots`` are their parentless spans (or their earliest span). With ``run_key`` (the
    conventions' run attribute) each summary names its run; when drawing (``keep_bodies``, no
    ``trace_id``) only the run that started last so far is followed: the traces of the others
    go by and their runs' summaries are ``partial`` (to draw one, stream that run alone), so
    memory holds one drawn trace, not one per run.

    With ``keep_bodies`` (drawing, not listing) a let-go trace whose root has arrived is not
    kept at all, so memory does not grow with the traces: per run there remain the
    :data:`RETIRED_KEPT` earliest of them, and one summary without a trace id that holds the
    run's earliest start and the step spans of its :data:`RETIRED_STEPS` lowest step numbers
    (for :func:`pick_run` and the choices a failed :func:`select_trace` names).

    Returns:
        Summaries of every trace, in order of start time, ready for :func:`select_trace`.
    """
    conventions = conventions or Conventions()
    is_step = conventions.is_step_span
    number = conventions.step_attribute
    held: dict[str, _Trace] = {}
    best: dict[str | None, _Trace] = {}  # per run: its earliest step-rooted trace

    def slim(s: SpanRecord) -> SpanRecord:
        """What a let-go trace keeps of a span: no resource, only the step number."""
        kept = {number: s.attributes[number]} if number and number in s.attributes else {}
        return replace(s, attributes=kept, resource={})

    def let_go(t: _Trace) -> None:
        if t.body is not None:
            t.marks = [slim(s) for s in t.body if not s.parent_span_id or is_step(s.name)]
            t.first = slim(t.first) if t.first is not None else None
            t.body = None

    retired: dict[str | None, _Retired] = {}

    def retired_of(run: str | None, start: int) -> _Retired:
        r = retired.get(run)
        if r is None:
            r = retired[run] = _Retired(start)
        return r

    gone = Fingerprints()  # the traces retired: a span of one that comes late is counted only

    def retire(t: _Trace, partial: bool = False) -> None:
        """Let a let-go trace whose root has arrived go entirely (drawing only)."""
        if not keep_bodies or held.get(t.trace_id) is not t:
            return
        del held[t.trace_id]
        gone.add(t.trace_id)
        r = retired_of(t.run_id, t.start)
        if partial and not r.partial:
            r.drop()
        r.add(t, number, is_step)

    # Drawing with several runs in the files: only the latest run so far (by its earliest
    # span) is followed; the traces of the others go by, their runs' summaries ``partial``.
    follow = keep_bodies and run_key is not None and trace_id is None
    firsts: dict[str | None, int] = {}
    focus: list[Any] = [None, False]  # the run followed, whether one is

    def rank(run: str | None) -> tuple[bool, int, str]:
        return (run is not None, firsts[run], run or "")

    wanted = trace_id.lower() if trace_id is not None else None
    for s in spans:
        t = held.get(s.trace_id)
        if t is None and gone and s.trace_id in gone:  # late, after its root: only counted
            retired_of(_run_of(s, run_key), s.start_time_unix_nano).count_span(s)
            continue
        if t is None:
            keep = keep_bodies and (wanted is None or s.trace_id.startswith(wanted))
            t = held[s.trace_id] = _Trace(
                s.trace_id, s.start_time_unix_nano, s.end_time_unix_nano,
                body=[] if keep else None, marks=None if keep else [],
                run_id=_run_of(s, run_key),
            )  # fmt: skip
        t.count += 1
        t.start = min(t.start, s.start_time_unix_nano)
        if follow:
            firsts[t.run_id] = min(firsts.get(t.run_id, t.start), t.start)
        t.end = max(t.end, s.end_time_unix_nano)
        if t.first is None or s.start_time_unix_nano < t.first.start_time_unix_nano:
            t.first = s if t.body is not None else slim(s)
        if t.body is not None:
            if len(t.body) < BODY_SPANS or not s.parent_span_id:
                t.body.append(s)
        elif not s.parent_span_id or is_step(s.name):
            t.marks.append(slim(s))  # type: ignore[union-attr]
        if not s.parent_span_id:
            t.rooted = True
        if not s.parent_span_id and t.body is None and t.marks is not None:
            retire(t)  # its root is here, and it is not the one drawn
        if s.parent_span_id or t.body is None or wanted is not None:
            continue
        # A root arrived for a trace still held whole: is it still a candidate?
        if follow and not focus[1]:
            focus[:] = [t.run_id, True]
        elif follow and t.run_id != focus[0]:
            if rank(t.run_id) > rank(focus[0]):
                old, focus[:] = focus[0], [t.run_id, True]
                best.pop(old, None)
                done = [x for x in held.values() if x.run_id == old and x.rooted]
                for known in done:  # the old run's traces go by from now on
                    let_go(known)
                    retire(known, partial=True)
                if done or old in retired:
                    retired_of(old, firsts.get(old, 0)).drop()
            else:
                let_go(t)
                retire(t, partial=True)
                continue
        if step is not None:
            if is_step(s.name) and number and s.attributes.get(number) != step:
                let_go(t)
                retire(t)
        elif is_step(s.name):
            known = best.get(t.run_id)
            if known is None or t.start < known.start:
                if known is not None:
                    let_go(known)
                    retire(known)
                best[t.run_id] = t
            else:
                let_go(t)
                retire(t)
        elif t.run_id in best:
            let_go(t)
            retire(t)
    out = []
    for run_id, r in retired.items():
        out += r.summaries(run_id)
    for t in held.values():
        if t.body is not None:
            out.extend(
                replace(summary, count=t.count) if t.count > len(t.body) else summary
                for summary in traces(t.body, run_key)
            )
        else:
            marks = tuple(t.marks or ())
            roots = tuple(sorted((m for m in marks if not m.parent_span_id),
                                 key=lambda m: m.start_time_unix_nano))  # fmt: skip
            if not roots and t.first is not None:
                roots = (t.first,)
            out.append(
                TraceSummary(
                    t.trace_id, roots, marks or roots, t.start, t.end, t.count, run_id=t.run_id
                )
            )
    return sorted(out, key=lambda x: x.start)
