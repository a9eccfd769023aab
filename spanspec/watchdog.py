"""The stall watchdog: a warning when a span outlives the ``max_duration`` its registry entry declares.

A silent hang (a deadlocked collective, a stopped worker) leaves the caller waiting forever, and a
trace only shows the stuck phase once it ends, which it never does. So a span that declares a
bound is *watched* while it is open (:func:`opened` and :func:`closed`, called by
:mod:`spanspec.runtime` for such spans only; :func:`watch` for any other span), and one light
daemon thread per process (started on the first watched span, never when no span declares a
bound) looks at the open ones. Once per span that outlives its bound it

- logs ONE warning (logger ``spanspec.watchdog``): the span, its attributes (sensitive ones
  already redacted by the runtime), how long it has been open, the process and its labels
  (rank, worker group), the worker call it is waiting for (:func:`note_call`), the open spans
  of the process and the Python stack of the thread that opened it;
- adds a :data:`STALL_EVENT` event to the span;
- calls the callbacks registered with :func:`on_stall` (a program counts its stalls there).

It never kills or interrupts anything. :func:`enable` / :func:`disable` switch it on and off
(``spanspec.export.setup`` does, from the ``watchdog`` setting). Needs only ``opentelemetry-api``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spanspec.spec import format_duration

__all__ = [
    "STALL_EVENT",
    "OpenSpan",
    "Stall",
    "closed",
    "disable",
    "enable",
    "is_enabled",
    "is_running",
    "note_call",
    "on_stall",
    "opened",
    "unwatch",
    "watch",
]

STALL_EVENT = "spanspec.stall"
_log = logging.getLogger("spanspec.watchdog")
_MAX_CALLS = 16  # worker calls remembered per watched span (the latest ones)


@dataclass(frozen=True)
class OpenSpan:
    """A span open in this process: what the stall warning lists."""

    name: str
    span_id: int
    parent_id: int | None
    open_s: float


@dataclass(frozen=True)
class Stall:
    """One span that outlived its bound, as reported to the :func:`on_stall` callbacks."""

    name: str
    attributes: Mapping[str, Any]
    open_s: float
    max_duration_s: float
    pid: int
    labels: Mapping[str, Any]
    waiting_for: tuple[str, ...]
    open_spans: tuple[OpenSpan, ...]
    stack: str
    message: str = field(repr=False, default="")


class _Call:
    __slots__ = ("at", "description", "pending")

    def __init__(self, description: str, pending: Callable[[], bool] | None) -> None:
        self.description = description
        self.pending = pending
        self.at = time.monotonic()


class _Named:
    """What :func:`watch` watches a span as: a name and a bound, its attributes shown as given."""

    __slots__ = ("bound", "name")

    def __init__(self, name: str, bound: float) -> None:
        self.name = name
        self.bound = bound

    def stall_attributes(self, attributes: Mapping[str, Any] | None) -> Mapping[str, Any]:
        return attributes or {}


# -- state ------------------------------------------------------------------------------------

_enabled = False
_labels: dict[str, Any] = {}
# The open bounded spans, in the order they were opened: id(anchor) -> (source, attributes, span,
# thread id, monotonic start, anchor). ``source`` has the span's ``name``, its ``bound`` and
# ``stall_attributes(attributes)`` (what a warning shows of them); ``anchor`` is an object unique
# to this opening that the entry keeps alive, so its id cannot be reused while the entry is here.
#
# Thread safety: the threads that open and end spans only insert and pop whole entries (one
# dict operation each, on int keys: no Python code runs inside them, so each is atomic under the
# GIL, and per object in a free-threaded build); an entry is an immutable tuple. The watchdog
# thread and note_call() read a copy (``_open.copy()``, one such operation) and never iterate the
# live dict. _calls follows the same rules; its lists are appended to by one thread (the one
# that opened the span) and copied by the watchdog before reading.
_open: dict[int, tuple[Any, Any, Any, int, float, object]] = {}
_calls: dict[int, list[_Call]] = {}  # id(anchor) -> the worker calls noted under that span
_poll_below = math.inf  # a bound below this starts the thread or polls faster (_ensure_thread)
_monotonic = time.monotonic
_thread_id = threading.get_ident
_callbacks: list[Callable[[Stall], None]] = []
_open_spans_source: Callable[[], Iterable[OpenSpan]] | None = None
_thread: threading.Thread | None = None
_stop = threading.Event()
_interval = 1.0
_lock = threading.Lock()


def enable(
    labels: Mapping[str, Any] | None = None,
    open_spans: Callable[[], Iterable[OpenSpan]] | None = None,
) -> None:
    """Watch the bounded spans opened from now on.

    ``labels`` name the process in warnings (``{"rank": 0, "group": "driver"}``); ``open_spans``
    lists every span open in the process (the exporter knows them; without it the warning lists
    the watched spans only). The thread starts with the first watched span.
    """
    global _enabled, _labels, _open_spans_source
    with _lock:
        _labels = dict(labels or {})
        _open_spans_source = open_spans
        _enabled = True


def disable() -> None:
    """Stop watching: the thread ends (within its poll interval), open spans are forgotten."""
    global _enabled, _thread, _open_spans_source, _interval, _poll_below
    with _lock:
        _enabled = False
        _interval, _poll_below = 1.0, math.inf
        thread, _thread = _thread, None
        _open_spans_source = None
        _open.clear()
        _calls.clear()
        _stop.set()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2.0)


def is_enabled() -> bool:
    """Whether bounded spans are watched."""
    return _enabled


def is_running() -> bool:
    """Whether the watchdog thread runs (only once a bounded span was opened while enabled)."""
    return _thread is not None and _thread.is_alive()


def on_stall(callback: Callable[[Stall], None]) -> Callable[[], None]:
    """Call ``callback(stall)`` for every stall (from the watchdog thread); return the undo.

    A callback that raises is logged and skipped.
    """
    _callbacks.append(callback)

    def remove() -> None:
        if callback in _callbacks:
            _callbacks.remove(callback)

    return remove


# -- the runtime's side (hot path of bounded spans only) --------------------------------------


def opened(source: Any, attributes: Any, span: Any, anchor: object) -> None:
    """Watch ``span``, just started by this thread, until :func:`closed` with the same ``anchor``
    (an object unique to this opening: the runtime's record of it); nothing when off.

    ``source`` has the span's ``name``, its ``bound`` in seconds and ``stall_attributes(attributes)``,
    called only when a warning shows them (the runtime's prepared gate). The hot path of bounded
    spans: one dict insert and a clock read.
    """
    if _enabled:
        _open[id(anchor)] = (source, attributes, span, _thread_id(), _monotonic(), anchor)
        if source.bound < _poll_below:  # the first watched span, or a shorter bound than any yet
            _ensure_thread(source.bound)


def closed(anchor: object) -> None:
    """The span opened with ``anchor`` ended (in any thread): forget it and its noted calls."""
    key = id(anchor)
    _open.pop(key, None)
    if _calls:  # after the pop: note_call() checks _open after adding, see there
        _calls.pop(key, None)


def watch(
    name: str, bound: float, span: Any, attributes: Mapping[str, Any] | None = None
) -> object | None:
    """Watch ``span`` (just started by this thread) against ``bound`` seconds until
    :func:`unwatch` with what this returns; None when off."""
    if not _enabled:
        return None
    handle = _Named(name, bound)
    opened(handle, attributes, span, handle)
    return handle


def unwatch(watched: object | None) -> None:
    """The span :func:`watch` returned ``watched`` for ended: forget it (and its noted calls)."""
    if watched is not None:
        closed(watched)


def _innermost(thread_id: int) -> int | None:
    """The key of the watched span this thread opened last that is still open."""
    for key, entry in reversed(_open.copy().items()):
        if entry[3] == thread_id:
            return key
    return None


def note_call(description: str, pending: Callable[[], bool] | None = None) -> None:
    """Note a call to another process made under this thread's innermost watched span.

    ``description`` names it (``PolicyWorker.train (actor pid 4711)``); ``pending()`` says
    whether its result is still awaited (a stall warning lists only those, when it can tell).
    Cleared when the span ends. Costs one global lookup when no bounded span is open.
    """
    if not _open:
        return
    key = _innermost(_thread_id())
    if key is None:
        return
    calls = _calls.setdefault(key, [])
    if key not in _open:  # ended meanwhile (by another thread): its closed() may have run first
        _calls.pop(key, None)
        return
    calls.append(_Call(description, pending))
    if len(calls) > _MAX_CALLS:
        del calls[0]


# -- the thread -------------------------------------------------------------------------------


def _ensure_thread(bound: float) -> None:
    global _thread, _interval, _poll_below
    with _lock:
        if not _enabled:
            return
        # Poll at a tenth of the shortest bound seen: a stall is reported within 10 % of it.
        _interval = min(_interval, max(0.05, min(1.0, bound / 10)))
        _poll_below = _interval * 10
        if _thread is not None:
            return
        _stop.clear()
        _thread = threading.Thread(target=_run, name="spanspec-watchdog", daemon=True)
        _thread.start()


def _run() -> None:
    me = threading.current_thread()
    warned: dict[int, object] = {}  # key -> anchor (held: its id is not reused while listed)
    while not _stop.wait(_interval) and _thread is me:
        now = _monotonic()
        table = _open.copy()
        for key in [k for k in warned if k not in table]:  # ended: forget
            del warned[key]
        for key, entry in table.items():
            if key not in warned and now - entry[4] > entry[0].bound:
                warned[key] = entry[5]
                try:
                    _report(key, entry, table, now)
                except Exception:  # the watchdog must never take anything down
                    _log.debug("stall report failed", exc_info=True)


def _report(key: int, entry: tuple[Any, ...], table: dict[int, Any], now: float) -> None:
    source, attributes, span, thread_id, start, _ = entry
    open_s = now - start
    waiting = _waiting_for(list(_calls.get(key, ())), now)
    spans = _open_spans(table, now)
    frame = sys._current_frames().get(thread_id)
    thread_name = next((t.name for t in threading.enumerate() if t.ident == thread_id), "a thread")
    stack = "".join(traceback.format_stack(frame)) if frame is not None else "(thread ended)\n"
    stall = Stall(
        source.name,
        dict(source.stall_attributes(attributes)),
        open_s,
        source.bound,
        os.getpid(),
        dict(_labels),
        waiting,
        spans,
        stack,
    )
    message = _message(stall, span, thread_name)
    stall = Stall(**{**stall.__dict__, "message": message})
    _log.warning("%s", message)
    try:
        span.add_event(
            STALL_EVENT,
            {
                "spanspec.stall.open_s": round(open_s, 3),
                "spanspec.stall.max_duration_s": source.bound,
                "spanspec.stall.waiting_for": list(waiting),
                "spanspec.stall.pid": stall.pid,
            },
        )
    except Exception:
        _log.debug("could not add the stall event", exc_info=True)
    for callback in list(_callbacks):
        try:
            callback(stall)
        except Exception:
            _log.warning("stall callback %r failed", callback, exc_info=True)


def _waiting_for(calls: list[_Call], now: float) -> tuple[str, ...]:
    """The noted calls still pending (all noted ones when pending cannot be told)."""
    out = []
    for call in calls:
        try:
            pending = call.pending() if call.pending is not None else True
        except Exception:
            pending = True
        if pending:
            out.append(f"{call.description}, called {now - call.at:.1f} s ago")
    return tuple(out)


def _open_spans(table: dict[int, Any], now: float) -> tuple[OpenSpan, ...]:
    source = _open_spans_source
    if source is not None:
        try:
            return tuple(source())
        except Exception:
            _log.debug("open spans unavailable", exc_info=True)
    # Only the watched spans: each under the one its thread opened before it, still open.
    entries = list(table.items())
    out = []
    for i, (key, entry) in enumerate(entries):
        parent = next((p for p in reversed(entries[:i]) if p[1][3] == entry[3]), None)
        out.append(
            OpenSpan(
                entry[0].name,
                _span_id(entry[2]) or key,
                (_span_id(parent[1][2]) or parent[0]) if parent else None,
                now - entry[4],
            )
        )
    return tuple(out)


def _span_id(span: Any) -> int | None:
    try:
        return span.get_span_context().span_id
    except Exception:
        return None


def _message(stall: Stall, span: Any, thread_name: str) -> str:
    labels = ", ".join(f"{k} {v}" for k, v in stall.labels.items())
    attrs = ", ".join(f"{k}={v!r}" for k, v in stall.attributes.items()) or "(none)"
    lines = [
        f"stall: span '{stall.name}' has been open {stall.open_s:.1f} s, longer than its "
        f"max_duration {format_duration(stall.max_duration_s)} (pid {stall.pid}{', ' if labels else ''}"
        f"{labels}); nothing is interrupted",
        f"  attributes: {attrs}",
    ]
    if stall.waiting_for:
        lines += [f"  waiting for: {w}" for w in stall.waiting_for]
    lines.append("  open spans in this process:")
    lines += _tree(stall.open_spans, _span_id(span))
    lines.append(f"  Python stack of the thread that opened it ({thread_name}):")
    lines += ["    " + line for line in stall.stack.rstrip().splitlines()]
    return "\n".join(lines)


def _tree(spans: tuple[OpenSpan, ...], stalled: int | None) -> list[str]:
    """The open spans, children indented under parents, oldest first."""
    ids = {s.span_id for s in spans}
    children: dict[int | None, list[OpenSpan]] = {}
    for s in sorted(spans, key=lambda s: -s.open_s):
        children.setdefault(s.parent_id if s.parent_id in ids else None, []).append(s)
    out: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in children.get(parent, ()):
            mark = "   <- stalled" if s.span_id == stalled else ""
            out.append(f"    {'  ' * depth}{s.name}  {s.open_s:.1f} s{mark}")
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return out or ["    (none known)"]


def _after_fork() -> None:
    """A forked child has no watchdog thread and none of its parent's open spans."""
    global _thread, _poll_below
    _thread, _poll_below = None, math.inf
    _open.clear()
    _calls.clear()
    _stop.clear()


os.register_at_fork(after_in_child=_after_fork)
