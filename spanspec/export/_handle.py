"""The :class:`TelemetryHandle`: the providers of one process, their stats, and a bounded shutdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spanspec.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

import atexit
import logging
import os
import signal
import threading
import time
import weakref
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace

from spanspec import watchdog
from spanspec.export._stats import ExportCpu, ExportStats, PipelineStats, _copy, _log

# -- the handle -------------------------------------------------------------------------------


class TelemetryHandle:
    """The providers of one process, and the means to flush and shut them down.

    ``tracer_provider`` / ``meter_provider`` are SDK providers when ``is_exporting``, otherwise
    the API's no-op providers. ``logger_provider`` is None unless logs are exported.
    """

    def __init__(
        self,
        settings: Settings,
        rank: int = 0,
        world_size: int = 1,
        *,
        is_exporting: bool = False,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        logger_provider: Any = None,
        resource: Resource | None = None,
        reason: str = "",
    ) -> None:
        self.settings = settings
        self.rank = rank
        self.world_size = world_size
        self.is_exporting = is_exporting
        self.reason = reason
        self.resource = resource
        self.tracer_provider: otel_trace.TracerProvider = (
            tracer_provider if tracer_provider is not None else otel_trace.NoOpTracerProvider()
        )
        self.meter_provider: otel_metrics.MeterProvider = (
            meter_provider if meter_provider is not None else otel_metrics.NoOpMeterProvider()
        )
        self.logger_provider = logger_provider
        self.pipelines: list[PipelineStats] = []
        self._open_spans: Any = None
        self._cpu = ExportCpu()
        self._exporters: list[Any] = []
        self._guards: list[Any] = []
        self._log_handler: logging.Handler | None = None
        self._filters: list[tuple[logging.Logger, logging.Filter]] = []
        self._prometheus: Any = None  # the /metrics server of the prometheus exporter
        self._console_pump: Any = None  # copies console lines to stdout (the console owner)
        self._lock = threading.Lock()
        self._final: ExportStats | None = None
        self._shutdown_owner: int | None = None
        self._done = threading.Event()
        self._sigterm_previous: dict[int, Any] = {}
        self._atexit: Any = None

    def __repr__(self) -> str:
        state = "exporting" if self.is_exporting else f"not exporting ({self.reason})"
        return (
            f"<TelemetryHandle rank={self.rank}/{self.world_size} {state} {self.settings.exporter}>"
        )

    @property
    def is_shut_down(self) -> bool:
        return self._final is not None

    def stats(self) -> ExportStats:
        """Return a snapshot of the counts (the final ones after :meth:`shutdown`)."""
        if self._final is not None:
            return self._final
        truncated = self._open_spans.truncated if self._open_spans is not None else 0
        self._cpu.measure()
        return ExportStats(
            [_copy(p) for p in self.pipelines],
            truncated,
            spans_produced=self._produced(),
            export_cpu_s=self._cpu.total(),
            process_cpu_s=time.process_time(),
        )

    def _produced(self) -> int:
        return self._open_spans.ended if self._open_spans is not None else 0

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now, waiting at most ``timeout_s``.

        Returns:
            True when every provider flushed in time; never raises.
        """
        if not self.is_exporting or self.is_shut_down:
            return True
        providers = [
            p for p in (self.tracer_provider, self.meter_provider, self.logger_provider) if p
        ]
        return _run_bounded(
            [(lambda p=p: p.force_flush()) for p in providers if hasattr(p, "force_flush")],
            timeout_s,
        )

    def shutdown(self, timeout_s: float | None = None) -> ExportStats:
        """End open spans (marked truncated), flush and close every provider within ``timeout_s``.

        ``timeout_s`` defaults to ``settings.shutdown_timeout_s``. Idempotent: later calls return
        the first call's stats. Logs one line per pipeline that lost anything. Never raises.

        Returns:
            The final :class:`ExportStats`.
        """
        if self._final is not None:
            return self._final
        timeout = self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        with self._lock:  # held for an instant only: a signal handler may interrupt the holder
            owner = self._shutdown_owner
            if owner is None:
                self._shutdown_owner = threading.get_ident()
        if owner is not None:
            # Someone is already shutting down: another thread (wait for it), or this very
            # thread, interrupted by SIGTERM mid-shutdown (waiting would deadlock).
            if owner != threading.get_ident():
                self._done.wait(timeout)
            return self._final if self._final is not None else self.stats()
        start = time.monotonic()
        timed_out = False
        truncated = 0
        watchdog.disable()
        try:
            if self.is_exporting:
                if self._open_spans is not None:
                    truncated = self._open_spans.end_all()
                self._cpu.measure()  # while the export threads live; their last exports add on
                tasks = [
                    lambda p=p: p.shutdown()
                    for p in (self.tracer_provider, self.meter_provider, self.logger_provider)
                    if p is not None and hasattr(p, "shutdown")
                ]
                # Keep a little of the budget to unblock exports still running.
                timed_out = not _run_bounded(tasks, max(0.0, timeout - 0.1))
                if timed_out:
                    _abort_exporters(self._exporters)
                if self._prometheus is not None:
                    self._prometheus.shutdown()
        except Exception:  # never into the caller
            _log.exception("telemetry shutdown failed")
        finally:
            self._detach()
            if self._console_pump is not None:  # the other processes have flushed by now
                self._console_pump.stop()
        final = ExportStats(
            [_copy(p) for p in self.pipelines],
            truncated,
            shutdown_s=time.monotonic() - start,
            shutdown_timed_out=timed_out,
            spans_produced=self._produced(),
            export_cpu_s=self._cpu.total(),
            process_cpu_s=time.process_time(),
        )
        self._final = final
        self._done.set()
        self._report(final)
        return final

    def destinations(self) -> str:
        """One line saying where each signal goes: ``traces -> file /x/traces.jsonl, otlp grpc
        http://h:4317; metrics -> prometheus http://127.0.0.1:9464/metrics; logs off``."""
        if not self.is_exporting:
            return f"telemetry off ({self.reason})"
        parts = []
        for signal_name in ("traces", "metrics", "logs"):
            here = [
                f"{p.exporter} {p.destination}" for p in self.pipelines if p.signal == signal_name
            ]
            parts.append(f"{signal_name} -> {', '.join(here)}" if here else f"{signal_name} off")
        return "; ".join(parts)

    def _report(self, final: ExportStats) -> None:
        if not self.is_exporting:
            return
        lossy = [p for p in final.pipelines if p.lost]
        for p in lossy:
            _log.warning(
                "telemetry: %s to %s %s lost %d of %d (%d dropped, %d in failed exports, "
                "%d unresolved at shutdown)",
                p.signal,
                p.exporter,
                p.destination,
                p.lost,
                p.ended if p.signal != "metrics" else p.submitted,
                p.dropped,
                p.failed,
                p.unresolved,
            )
        for p in final.pipelines:
            if p.signal == "traces" and p.repaired:
                _log.warning(
                    "telemetry: traces to %s %s: %d spans had a name or text that is not valid "
                    "UTF-8 text; exported with each bad character replaced by U+FFFD",
                    p.exporter,
                    p.destination,
                    p.repaired,
                )
            if p.signal == "traces" and p.attributes_dropped:
                _log.warning(
                    "telemetry: traces to %s %s: %d attributes dropped by OpenTelemetry limits "
                    "(OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, OTEL_ATTRIBUTE_COUNT_LIMIT, "
                    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT); each span says how many in "
                    "droppedAttributesCount",
                    p.exporter,
                    p.destination,
                    p.attributes_dropped,
                )
        if final.shutdown_timed_out:
            _log.warning(
                "telemetry: shutdown gave up after %.1f s; the collector did not answer in time",
                final.shutdown_s,
            )
        if not lossy and not any(p.attributes_dropped for p in final.pipelines):
            _log.info("telemetry: shut down in %.2f s, nothing lost", final.shutdown_s)

    def _detach(self) -> None:
        for guard in self._guards:
            guard.closed = True
        for logger, flt in self._filters:
            logger.removeFilter(flt)
        self._filters.clear()
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler = None
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        if self._sigterm_previous and threading.current_thread() is threading.main_thread():
            for sig, previous in self._sigterm_previous.items():
                try:
                    if signal.getsignal(sig) == self._sigterm_handler:
                        signal.signal(sig, previous)
                except (ValueError, OSError):
                    pass
            self._sigterm_previous = {}

    # -- signals and exit --

    def install_sigterm_flush(self) -> bool:
        """Flush on SIGTERM and SIGHUP (a closed terminal or ssh session), ending open spans as
        truncated, then hand the signal to the previous handler (or die by it: exit 143, 129).

        Only possible in the main thread. Returns:
            True when installed.
        """
        if threading.current_thread() is not threading.main_thread():
            return False
        found = {}
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                previous = signal.getsignal(sig)
                if previous == signal.SIG_IGN:  # nohup: the process means to outlive it
                    continue
                signal.signal(sig, self._sigterm_handler)
            except (ValueError, OSError):
                continue
            found[sig] = previous if previous is not None else signal.SIG_DFL
        self._sigterm_previous = found
        return signal.SIGTERM in found

    def _sigterm_handler(self, signum: int, frame: Any) -> None:
        previous = self._sigterm_previous.get(signum, signal.SIG_DFL)
        self.shutdown()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _register_atexit(self) -> None:
        ref = weakref.ref(self)

        def at_exit() -> None:
            handle = ref()
            if handle is not None:
                handle.shutdown()

        self._atexit = at_exit
        atexit.register(at_exit)


def _zero_after_fork(ref: weakref.ref[TelemetryHandle]) -> None:
    """In a forked child, count from zero: the SDK dropped the parent's queue, nothing was lost.
    (The child exports as itself: the exporters set ``process.pid``, see ``_guards``.)"""
    handle = ref()
    if handle is None:
        return
    handle._console_pump = None  # the parent owns the console; its pump did not fork
    handle._cpu.reset()
    for stats in handle.pipelines:
        stats.ended = stats.submitted = stats.exported = stats.failed = stats.failed_exports = 0
        stats.points_submitted = stats.points_exported = 0


def _run_bounded(tasks: list[Any], timeout_s: float) -> bool:
    """Run ``tasks`` in daemon threads at once; True if all finished within ``timeout_s``."""
    threads = [
        threading.Thread(target=_quietly, args=(t,), name="spanspec-shutdown", daemon=True)
        for t in tasks
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _quietly(task: Any) -> None:
    try:
        task()
    except Exception:
        _log.debug("telemetry: flush step failed", exc_info=True)


def _abort_exporters(exporters: list[Any]) -> None:
    """Shut the real exporters down from aside: closes gRPC channels, stops retry back-offs."""
    for exporter in exporters:
        threading.Thread(
            target=_quietly, args=(exporter.shutdown,), name="spanspec-abort", daemon=True
        ).start()
