"""What a span used of its process: CPU time and resident memory, measured by the runtime.

A span that declares the registry's ``conventions.cpu_attribute``, ``rss_peak_attribute`` or
``rss_rise_attribute`` gets them set when it ends (``spanspec.span`` does it: no call at the
site). The values are the process's, not the thread's:

- **CPU seconds**: user plus system time of every thread of the process (a torch worker's work
  runs on its pool threads) between the span's start and end, from ``getrusage(RUSAGE_SELF)``.
  Over the span's wall time it says how busy the process was: 1.0 is one core kept busy, below
  1 it waited (I/O, a collective, a lock) or the machine gave it no core; above 1 several
  threads ran at once.
- **RSS peak**: the resident-set high-water mark within the span. At the span's start ``5`` is
  written to ``/proc/self/clear_refs`` (Linux resets the mark, ``VmHWM``, to the current RSS);
  at its end the mark is read from the same ``getrusage`` call as the CPU time (``ru_maxrss``).
  Where ``clear_refs`` is not writable (an old kernel, a locked-down container) the value is the
  process's peak so far, still an upper bound.
- **RSS rise**: how far that mark rose above the RSS at the span's start: what the span itself
  needed, apart from what the process already held. Right after the reset the mark *is* the
  RSS, so the start's ``getrusage`` gives it; without the reset it is read from
  ``/proc/self/statm``.

The mark is one per process, so measured spans may nest or overlap (in threads): before a span
resets it, the mark reached so far is kept for every other measured span still open, and each
one's peak is the larger of what was kept for it and the mark at its end.

The cost is one ``write`` and two ``getrusage`` calls per span, on a file descriptor opened once
per process (``bench/bench_spanspec.py`` measures it). Where there is no ``getrusage`` (not a
Unix) nothing is measured and no such attribute is set. Standard library only: the runtime's
hot path imports this.

What the standard library cannot see (a GPU's memory) a program adds as a *meter*
(:func:`add_meter`): its ``begin()`` runs as every measured span of the process starts, its
``end()`` as it ends, and the attributes ``end()`` returns are set on the span where it declares
them. A process that adds none pays one truthiness test per span for the feature.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "MEASURABLE",
    "Meter",
    "add_meter",
    "begin",
    "current_rss",
    "end",
    "process_cpu_seconds",
    "remove_meter",
    "reset_rss_high_water_mark",
    "rss_high_water_mark",
]

try:
    from resource import RUSAGE_SELF as _SELF
    from resource import getrusage as _getrusage
except ImportError:  # not a Unix
    _getrusage, _SELF = None, 0

MEASURABLE = _getrusage is not None
"""Whether this platform gives a process's CPU time and memory peak (a Unix)."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_UNOPENED = -2
# The /proc files, opened on first use and kept open (-1: not available). /proc/self is
# resolved when a file is opened, so a forked child opens its own (os.register_at_fork).
_clear_refs = _UNOPENED
_statm = _UNOPENED
# The measurings open in this process: key -> [CPU seconds at start, RSS at start in kB (None:
# unknown), the mark kept for it in kB, ((meter, what its begin() returned), ...) or None].
# Inserts and deletes of whole entries are atomic; a reader iterates a copy.
_open: dict[int, list] = {}
_log = logging.getLogger("spanspec")


class Meter(Protocol):
    """What a program measures on every measured span besides CPU time and RSS."""

    def begin(self) -> Any:
        """Called as a measured span starts; what it returns goes to :meth:`end`."""

    def end(self, began: Any) -> Mapping[str, Any]:
        """Called as that span ends; returns attributes for it (those it does not declare are
        dropped quietly, the rest checked as ``spanspec.annotate`` checks them)."""


_meters: tuple[Meter, ...] = ()
_failed: set[int] = set()  # ids of meters that raised (logged once each)


def add_meter(meter: Meter) -> None:
    """Measures ``meter`` on every measured span of this process from now on (once, however
    often it is added). A meter that raises is skipped for that span, logged once."""
    global _meters
    if not any(m is meter for m in _meters):
        _meters = (*_meters, meter)


def remove_meter(meter: Meter) -> None:
    """Stops measuring ``meter`` (spans open now still get its :meth:`Meter.end`)."""
    global _meters
    _meters = tuple(m for m in _meters if m is not meter)
    _failed.discard(id(meter))


def _meter_failed(meter: Meter, exc: Exception) -> None:
    if id(meter) not in _failed:
        _failed.add(id(meter))
        _log.warning(
            "usage meter %r raised %r; skipped for that span (the span itself is kept)", meter, exc
        )


def _after_fork() -> None:
    global _clear_refs, _statm
    _clear_refs = _statm = _UNOPENED
    _open.clear()  # the parent's spans: not this process's to measure


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _open_fd(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return -1


def reset_rss_high_water_mark() -> bool:
    """Resets ``VmHWM`` to the current RSS; returns False where ``/proc/self/clear_refs`` is not
    writable (the mark then keeps the process's peak so far).

    A measured span open in this process keeps its peak only if the reset goes through
    :func:`begin`; a direct call takes it from them.
    """
    global _clear_refs
    if _clear_refs == _UNOPENED:
        _clear_refs = _open_fd("/proc/self/clear_refs", os.O_WRONLY)
    if _clear_refs < 0:
        return False
    try:
        os.write(_clear_refs, b"5")
    except OSError:
        _clear_refs = -1  # refused once: refused for good
        return False
    return True


def rss_high_water_mark() -> int | None:
    """Returns this process's resident-set high-water mark in bytes (``ru_maxrss``, kilobytes on
    Linux), or None where ``getrusage`` is missing."""
    if _getrusage is None:
        return None
    return _getrusage(_SELF).ru_maxrss * 1024


def process_cpu_seconds() -> float | None:
    """Returns the CPU seconds (user + system) this process's threads have used so far, or None
    where ``getrusage`` is missing."""
    if _getrusage is None:
        return None
    r = _getrusage(_SELF)
    return r.ru_utime + r.ru_stime


def current_rss() -> int | None:
    """Returns this process's resident set now, in bytes (None without ``/proc/self/statm``)."""
    global _statm
    if _statm == _UNOPENED:
        _statm = _open_fd("/proc/self/statm", os.O_RDONLY)
    if _statm < 0:
        return None
    try:
        return int(os.pread(_statm, 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def begin(key: int) -> None:
    """Starts measuring under ``key`` (unique among the measurings open in this process); needs
    ``getrusage`` (:data:`MEASURABLE`)."""
    if _open:  # other measured spans are open: keep the mark they reached before the reset
        mark = _getrusage(_SELF).ru_maxrss
        for record in list(_open.values()):
            if mark > record[2]:
                record[2] = mark
    reset = reset_rss_high_water_mark()
    r = _getrusage(_SELF)
    if reset:
        rss = r.ru_maxrss  # right after the reset the mark is the RSS (kB)
    else:
        now = current_rss()
        rss = None if now is None else now // 1024
    began = None
    if _meters:
        began = []
        for meter in _meters:
            try:
                began.append((meter, meter.begin()))
            except Exception as exc:  # a program's meter never stops its span
                _meter_failed(meter, exc)
    _open[key] = [r.ru_utime + r.ru_stime, rss, 0, began]


def end(key: int) -> tuple[float, int, int | None, dict[str, Any] | None] | None:
    """Ends the measuring :func:`begin` started under ``key``: ``(CPU seconds, RSS peak in
    bytes, its rise over the start in bytes or None when the start's RSS is unknown, the
    meters' attributes or None without meters)``; None when this process did not begin it (a
    span entered before a fork and ended in the child)."""
    record = _open.pop(key, None)
    if record is None:
        return None
    r = _getrusage(_SELF)
    cpu, start, kept, began = record
    peak = r.ru_maxrss if r.ru_maxrss > kept else kept
    cpu = r.ru_utime + r.ru_stime - cpu
    rise = None if start is None else ((peak - start) * 1024 if peak > start else 0)
    extra = None
    if began is not None:
        extra = {}
        for meter, value in began:
            try:
                extra.update(meter.end(value))
            except Exception as exc:
                _meter_failed(meter, exc)
    return (cpu if cpu > 0.0 else 0.0), peak * 1024, rise, extra
