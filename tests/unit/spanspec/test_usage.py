"""spanspec.usage: the CPU time and memory peak the runtime measures on the spans that declare
the registry's ``cpu_attribute``, ``rss_peak_attribute`` and ``rss_rise_attribute``."""

from __future__ import annotations

import os
import textwrap
import threading
import time

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanspec
from spanspec import usage
from spanspec.testing import capture

pytestmark = [
    pytest.mark.skipif(not usage.MEASURABLE, reason="needs getrusage (a Unix)"),
    pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc"),
]

MiB = 2**20
REGISTRY = """
version: 1
groups:
  work: {description: Work.}
  other: {description: Other work.}
attributes:
  app.cpu: {type: float, brief: CPU seconds.}
  app.rss: {type: int, brief: RSS peak.}
  app.rise: {type: int, brief: RSS rise.}
  app.id: {type: int, brief: An id.}
spans:
  - name: app.work
    group: work
    brief: Measured.
    attributes: {app.id: recommended, app.cpu: recommended, app.rss: recommended, app.rise: recommended}
  - name: app.bounded
    group: work
    brief: Measured and watched.
    max_duration: 10m
    attributes: {app.cpu: recommended, app.rss: recommended}
  - name: app.plain
    group: other
    brief: Not measured.
    attributes: {app.id: recommended}
"""
CONVENTIONS = """
conventions:
  cpu_attribute: app.cpu
  rss_peak_attribute: app.rss
  rss_rise_attribute: app.rise
"""


def _spec(tmp_path, conventions: str = CONVENTIONS) -> spanspec.Spec:
    path = tmp_path / "registry.yaml"
    path.write_text(textwrap.dedent(REGISTRY) + textwrap.dedent(conventions))
    return spanspec.load(path)


@pytest.fixture
def spec(tmp_path) -> spanspec.Spec:
    return _spec(tmp_path)


def _rss() -> int:
    with open("/proc/self/status", "rb") as f:
        text = f.read()
    at = text.index(b"VmRSS:")
    return int(text[at + 6 : text.index(b"kB", at)]) * 1024


def _allocate(size: int) -> None:
    block = bytearray(b"\x01") * size  # written, so resident
    del block


def test_a_block_allocated_inside_a_span_is_in_its_peak_and_rise(spec):
    with capture(spec) as spans:
        before = _rss()
        with spanspec.span("app.work", **{"app.id": 1}):
            _allocate(64 * MiB)
        with spanspec.span("app.work", **{"app.id": 2}):
            pass
    first, second = spans.named("app.work")
    peak = first.attributes["app.rss"]
    # The kernel counts RSS in per-thread batches (up to 64 pages each): a MiB of slack.
    assert peak - before >= 63 * MiB, (peak, before)
    assert first.attributes["app.rise"] >= 63 * MiB
    assert type(first.attributes["app.cpu"]) is float and first.attributes["app.id"] == 1
    # the mark was reset at the second span's start: without the block it peaks lower
    assert second.attributes["app.rss"] < peak - 32 * MiB
    assert second.attributes["app.rise"] < 32 * MiB
    assert usage.rss_high_water_mark() >= _rss() - MiB  # the same counters, read a moment apart


def _cpu_and_wall(spans, work) -> tuple[float, float]:
    with spanspec.span("app.work"):
        work()
    recorded = spans.all()[-1]
    return recorded.attributes["app.cpu"], (recorded.end_time - recorded.start_time) / 1e9


def test_busy_work_takes_cpu_as_long_as_it_lasts_and_a_sleep_takes_none(spec):
    clocks = {}

    def spin() -> None:  # 0.25 s of this thread's CPU, however long the machine takes to give it
        thread, process = time.thread_time(), time.process_time()
        while time.thread_time() - thread < 0.25:
            pass
        clocks["thread"], clocks["process"] = (
            time.thread_time() - thread,
            time.process_time() - process,
        )

    with capture(spec) as spans:
        cpu, wall = _cpu_and_wall(spans, spin)
        # the span's figure is the process's CPU: at least the spinning thread's, at most what
        # every thread used around it (plus getrusage's microsecond steps)
        assert clocks["thread"] - 0.002 <= cpu <= clocks["process"] + 0.01, (cpu, clocks)
        # ~1.0 on a free core; below when the machine runs other work too (what it is for)
        assert cpu / wall > 0.5 or os.getloadavg()[0] > (os.cpu_count() or 1), (cpu, wall)
        cpu, wall = _cpu_and_wall(spans, lambda: time.sleep(0.3))
        assert wall >= 0.3 and cpu < 0.03, (cpu, wall)  # waiting uses no CPU


def test_an_outer_span_keeps_its_peak_across_an_inner_one(spec):
    # The mark is one per process: the inner span's reset must not take the outer one's peak.
    with capture(spec) as spans:
        with spanspec.span("app.work", **{"app.id": 0}):
            _allocate(64 * MiB)  # freed before the inner span resets the mark
            with spanspec.span("app.work", **{"app.id": 1}):
                pass
    inner, outer = spans.named("app.work")
    assert (inner.attributes["app.id"], outer.attributes["app.id"]) == (1, 0)
    assert outer.attributes["app.rise"] >= 63 * MiB
    assert outer.attributes["app.rss"] >= inner.attributes["app.rss"] + 32 * MiB
    assert inner.attributes["app.rise"] < 32 * MiB  # the block was gone before it began


def test_a_span_in_another_thread_does_not_take_an_open_spans_peak(spec):
    started, done = threading.Event(), threading.Event()

    def other() -> None:
        started.wait()
        with spanspec.span("app.work", **{"app.id": 1}):
            pass
        done.set()

    with capture(spec) as spans:
        thread = threading.Thread(target=other)
        thread.start()
        with spanspec.span("app.work", **{"app.id": 0}):
            _allocate(64 * MiB)
            started.set()
            done.wait()
        thread.join()
    other_span, this = spans.named("app.work")
    assert this.attributes["app.rise"] >= 63 * MiB
    assert other_span.attributes["app.rise"] < 32 * MiB


def test_only_the_declared_ones_are_set(spec):
    with capture(spec) as spans:
        with spanspec.span("app.bounded"):  # declares app.cpu and app.rss, not app.rise
            pass
        with spanspec.span("app.plain", **{"app.id": 3}):
            pass
    assert set(spans.one("app.bounded").attributes) == {"app.cpu", "app.rss"}
    assert dict(spans.one("app.plain").attributes) == {"app.id": 3}


def test_an_int_cpu_attribute_gets_whole_seconds(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(
        textwrap.dedent(REGISTRY).replace("app.cpu: {type: float", "app.cpu: {type: int")
        + textwrap.dedent(CONVENTIONS)
    )
    with capture(spanspec.load(path)) as spans:
        with spanspec.span("app.work"):
            pass
    assert spans.one("app.work").attributes["app.cpu"] == 0  # an int, as declared


def test_without_the_conventions_nothing_is_measured(tmp_path):
    with capture(_spec(tmp_path, conventions="")) as spans:
        with spanspec.span("app.work", **{"app.id": 1}):
            pass
    assert dict(spans.one("app.work").attributes) == {"app.id": 1}


def test_a_span_that_is_off_measures_nothing(spec, monkeypatch):
    calls = []
    monkeypatch.setattr("spanspec.runtime._begin", lambda: calls.append(1))
    with capture(spec, groups="other") as spans:
        with spanspec.span("app.work"):
            pass
    assert calls == [] and len(spans) == 0


def test_a_failing_block_is_measured_and_the_error_recorded(spec):
    with capture(spec) as spans:
        with pytest.raises(ValueError), spanspec.span("app.bounded"):
            raise ValueError("boom")
    recorded = spans.one("app.bounded")
    assert recorded.status.status_code.name == "ERROR"
    assert recorded.attributes["app.rss"] > 0 and recorded.attributes["app.cpu"] >= 0.0


@pytest.mark.parametrize("limit", [1, 3])
def test_an_attribute_count_limit_drops_and_counts_as_the_sdk_does(spec, limit):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=limit))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanspec.activate(spec, groups="all", tracer_provider=provider, env_var=None)
    try:
        for _ in range(2):  # the first span teaches the runtime the span class, the second uses it
            with spanspec.span("app.work", **{"app.id": 1}):
                pass
    finally:
        spanspec.deactivate()
    for recorded in exporter.get_finished_spans():
        assert len(recorded.attributes) == limit
        assert recorded.dropped_attributes == 4 - limit  # the id and 3 measured, limit kept


class _Meter:
    """A program's meter: counts its calls, returns what it is told to."""

    def __init__(self, result: dict, fail: str = "") -> None:
        self.result, self.fail, self.calls = result, fail, []

    def begin(self) -> int:
        self.calls.append("begin")
        if self.fail == "begin":
            raise RuntimeError("no device")
        return len(self.calls)

    def end(self, began: int) -> dict:
        self.calls.append(("end", began))
        if self.fail == "end":
            raise RuntimeError("no device")
        return self.result


@pytest.fixture
def meter():
    made = []

    def make(result: dict, fail: str = "") -> _Meter:
        made.append(_Meter(result, fail))
        usage.add_meter(made[-1])
        usage.add_meter(made[-1])  # once, however often added
        return made[-1]

    yield make
    for m in made:
        usage.remove_meter(m)
    assert usage._meters == ()


def test_a_meter_sets_what_the_span_declares_and_drops_the_rest_quietly(spec, meter, caplog):
    m = meter({"app.id": 7, "app.undeclared": 1})
    with capture(spec) as spans:
        with spanspec.span("app.work"):
            pass
        with spanspec.span("app.plain", **{"app.id": 3}):  # not measured: the meter is not run
            pass
    assert m.calls == ["begin", ("end", 1)]
    work = spans.one("app.work").attributes
    assert work["app.id"] == 7 and "app.undeclared" not in work and work["app.rss"] > 0
    assert dict(spans.one("app.plain").attributes) == {"app.id": 3}
    assert caplog.records == []


def test_a_meter_value_of_the_wrong_type_is_refused_as_annotate_refuses_it(spec, meter):
    meter({"app.id": "seven"})
    with capture(spec, strict=False) as spans:
        with spanspec.span("app.work"):
            pass
    assert "app.id" not in spans.one("app.work").attributes


@pytest.mark.parametrize("fail", ["begin", "end"])
def test_a_meter_that_raises_is_skipped_and_logged_once(spec, meter, caplog, fail):
    meter({"app.id": 7}, fail=fail)
    with capture(spec) as spans:
        for _ in range(2):
            with spanspec.span("app.work"):
                pass
    assert len(spans) == 2
    assert all("app.id" not in s.attributes and s.attributes["app.rss"] > 0 for s in spans)
    warnings = [r.getMessage() for r in caplog.records if "usage meter" in r.getMessage()]
    assert len(warnings) == 1 and "RuntimeError('no device')" in warnings[0], warnings


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_span_entered_before_a_fork_ends_in_the_child_unmeasured(spec):
    with capture(spec) as spans:
        pid = -1
        try:
            with spanspec.span("app.work", **{"app.id": 1}):
                pid = os.fork()
                if pid == 0:  # the child measures its own span, then leaves the parent's block
                    with spanspec.span("app.work", **{"app.id": 2}):
                        pass
            if pid == 0:
                inner, outer = spans.named("app.work")[-2:]
                ok = inner.attributes["app.rss"] > 0 and "app.rss" not in outer.attributes
                os._exit(0 if ok else 5)
        finally:
            if pid == 0:  # whatever happened, the child never goes back to pytest
                os._exit(4)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert spans.one("app.work").attributes["app.rss"] > 0  # the parent's own, measured


def test_in_strict_mode_a_bad_meter_value_raises_and_the_span_still_ends(spec, meter):
    from opentelemetry import trace

    meter({"app.id": "seven"})
    with capture(spec, strict=True) as spans:
        with pytest.raises(spanspec.SpecError, match=r"app\.id"):
            with spanspec.span("app.work"):
                pass
        assert trace.get_current_span() is trace.INVALID_SPAN  # the context was restored
    assert spans.one("app.work").end_time is not None
