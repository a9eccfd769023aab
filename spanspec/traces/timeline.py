"""Spans laid out in time: one lane per process, nested tracks, and the Chrome trace-event format.

A *lane* is one process of a job, named by the resource attributes the registry's
``conventions.lane_attributes`` lists (a worker group and a rank give ``policy 0``,
``generation 1``; the ``main_lane`` process is named by its first value alone and drawn first),
else by its ``service.name`` and ``process.pid``. Inside a lane, spans are packed onto *tracks* so that the spans of one track
nest properly (each starts and ends inside the one it sits on, or after it) — what a flame-graph
row and a Chrome trace "thread" both need; overlapping siblings (asyncio, threads) get a track of
their own.

:func:`to_chrome_trace` writes the `Trace Event Format
<https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU>`_ that Perfetto
UI and ``chrome://tracing`` open: complete events (``"ph": "X"``, ``ts``/``dur`` in
microseconds) with ``pid`` = the lane and ``tid`` = the track, plus ``process_name`` /
``thread_name`` metadata events naming them, and each span link whose target is written too as a
flow event pair (``"ph": "s"`` at the linked span, ``"ph": "f"`` at the linking one): an arrow
from the work done elsewhere to the span that used it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spanspec.spec import Conventions
from spanspec.traces.otlp_json import SpanRecord

__all__ = ["Lane", "lane_of", "lanes", "pack_tracks", "to_chrome_trace"]


@dataclass(frozen=True, slots=True)
class Lane:
    """One process: ``key`` identifies it, ``label`` is what a person reads, ``order`` sorts."""

    key: tuple[Any, ...]
    label: str
    order: tuple[int, str]


def lane_of(resource: Mapping[str, Any], conventions: Conventions | None = None) -> Lane:
    """Return the lane of a span from its resource attributes.

    With the registry's ``conventions.lane_attributes`` on the resource (the first one at least),
    the lane is named by their values (``policy 0``), the ``main_lane`` one by its first value
    alone, and ordered main lane first, then by name; a process without them by its
    ``service.name`` and ``process.pid``, after the others.
    """
    keys = conventions.lane_attributes if conventions is not None else ()
    first = resource.get(keys[0]) if keys else None
    if first is not None and first != "":
        values = [resource.get(k) for k in keys]
        main = conventions is not None and first == conventions.main_lane
        label = str(first) if main else " ".join(str(v) for v in values if v is not None)
        key: tuple[Any, ...] = (*values, resource.get("process.pid"))
        return Lane(key, label, (0 if main else 1, label))
    service = str(resource.get("service.name", "unknown_service"))
    pid = resource.get("process.pid")
    label = f"{service} pid {pid}" if pid is not None else service
    return Lane((service, pid), label, (2, label))


def lanes(spans: Iterable[SpanRecord], conventions: Conventions | None = None) -> list[Lane]:
    """The distinct lanes of ``spans`` (see :func:`lane_of`): the main lane first, then the
    others by name."""
    found = {}
    for s in spans:
        lane = lane_of(s.resource, conventions)
        found.setdefault(lane.key, lane)
    return sorted(found.values(), key=lambda lane: lane.order)


def pack_tracks(spans: Sequence[SpanRecord]) -> dict[int, tuple[int, int]]:
    """Assign each span (by ``id()``) a ``(track, depth)`` so that every track nests properly.

    Spans are taken in start order (longer first on ties); a span goes on the lowest track whose
    innermost still-open span contains it, or that has nothing open; ``depth`` is how many open
    spans of that track it sits inside.
    """
    stacks: list[list[int]] = []  # per track: end times of the open spans, innermost last
    out: dict[int, tuple[int, int]] = {}
    for s in sorted(spans, key=lambda s: (s.start_time_unix_nano, -s.end_time_unix_nano)):
        start, end = s.start_time_unix_nano, max(s.start_time_unix_nano, s.end_time_unix_nano)
        for number, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                out[id(s)] = (number, len(stack))
                stack.append(end)
                break
        else:
            stacks.append([end])
            out[id(s)] = (len(stacks) - 1, 0)
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def to_chrome_trace(
    spans: Sequence[SpanRecord], conventions: Conventions | None = None
) -> dict[str, Any]:
    """Return the Chrome trace-event JSON object (``{"traceEvents": [...], ...}``) of ``spans``,
    one process per lane (see :func:`lane_of`).

    Each span is one complete event: ``name``, ``cat`` (its instrumentation scope), ``ph: "X"``,
    ``ts`` and ``dur`` (microseconds since the earliest span), ``pid`` (the lane, from 1),
    ``tid`` (the track in the lane, from 1) and ``args`` (attributes, ids, links, status).
    Metadata events name each process and thread and keep the lanes in order.

    Each link of a span to another span in ``spans`` is a flow (an arrow in Perfetto):
    ``{"ph": "s", "cat": "link", "name": "link", "id": N}`` as the linked span ends (on its
    lane and track), and ``{"ph": "f", "bp": "e"}`` with the same ``cat``, ``name`` and ``id``
    inside the linking span when the linked one ended (at its start, if that is later), so the
    arrow points forwards in time. Links to spans not written are left out;
    ``otherData.links`` counts the flows.
    """
    if not spans:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    origin = min(s.start_time_unix_nano for s in spans)
    by_lane: dict[tuple[Any, ...], list[SpanRecord]] = {}
    for s in spans:
        by_lane.setdefault(lane_of(s.resource, conventions).key, []).append(s)
    events: list[dict[str, Any]] = []
    placed: dict[tuple[str, str], tuple[int, int]] = {}  # (trace, span id) -> (pid, tid)
    for pid, lane in enumerate(lanes(spans, conventions), start=1):
        members = by_lane[lane.key]
        tracks = pack_tracks(members)
        for s in members:
            placed.setdefault((s.trace_id, s.span_id), (pid, tracks[id(s)][0] + 1))
        events.append(
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": lane.label}}
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
        for tid in sorted({track for track, _ in tracks.values()}):
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid + 1,
                    "args": {"name": "spans" if tid == 0 else f"spans (overlap {tid})"},
                }
            )
        for s in sorted(members, key=lambda s: s.start_time_unix_nano):
            args = {k: _json_value(v) for k, v in s.attributes.items()}
            args.update(
                {
                    "trace_id": s.trace_id,
                    "span_id": s.span_id,
                    "parent_span_id": s.parent_span_id or "",
                }
            )
            if s.links:  # where the work it used was done (drawn as flows too)
                args["links"] = [f"{link.trace_id}/{link.span_id}" for link in s.links]
            if s.is_error:
                args["status"] = f"ERROR {s.status_message}".strip()
            events.append(
                {
                    "name": s.name,
                    "cat": s.scope or "span",
                    "ph": "X",
                    "ts": (s.start_time_unix_nano - origin) / 1000,
                    "dur": s.duration_ns / 1000,
                    "pid": pid,
                    "tid": tracks[id(s)][0] + 1,
                    "args": args,
                }
            )
    flows = _flows(spans, placed, origin)
    return {
        "traceEvents": events + flows,
        "displayTimeUnit": "ms",
        "otherData": {"origin_unix_nano": origin, "spans": len(spans), "links": len(flows) // 2},
    }


def _flows(
    spans: Sequence[SpanRecord], placed: Mapping[tuple[str, str], tuple[int, int]], origin: int
) -> list[dict[str, Any]]:
    """A flow event pair per link whose target is placed: from the linked span to the linker."""
    ends = {(s.trace_id, s.span_id): (s.start_time_unix_nano, s.end_time_unix_nano) for s in spans}
    out: list[dict[str, Any]] = []
    for s in sorted(spans, key=lambda s: s.start_time_unix_nano):
        here = placed.get((s.trace_id, s.span_id))
        for link in s.links:
            there = placed.get((link.trace_id, link.span_id))
            if here is None or there is None:
                continue
            number = len(out) // 2 + 1
            common = {"cat": "link", "name": "link", "id": number}
            # Leaves the linked span as it ends (1 ns before, so inside it) and lands in the
            # linking span when that work was done (its start, if that was earlier): forwards.
            first, done = ends[(link.trace_id, link.span_id)]
            leave = max(first, done - 1)
            land = min(max(done, s.start_time_unix_nano), s.end_time_unix_nano)
            out.append(
                {
                    **common,
                    "ph": "s",
                    "ts": (leave - origin) / 1000,
                    "pid": there[0],
                    "tid": there[1],
                }
            )
            out.append(
                {
                    **common,
                    "ph": "f",
                    "bp": "e",
                    "ts": (land - origin) / 1000,
                    "pid": here[0],
                    "tid": here[1],
                }
            )
    return out
