"""A collector that is dead, silent or killed never stalls the producer; shutdown stays bounded;
SIGTERM flushes; a forked child does not re-export its parent's spans."""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import spanspec
from spanspec import export, metrics
from spanspec.settings import load_settings
from tests.otlp_receiver import BlackHole, OtlpReceiver, dead_endpoint
from tests.traces import attributes, metric_points

REPO = Path(__file__).resolve().parents[2]
PROTOCOLS = ["grpc", "http/protobuf"]


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


def start_otlp(env, spec, endpoint: str, protocol: str) -> export.TelemetryHandle:
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    settings = load_settings({"metrics_enabled": False}, env=os.environ)
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    return handle


def produce(count: int) -> list[float]:
    """Emit ``count`` spans; return each one's start-to-end cost in seconds."""
    costs = []
    for i in range(count):
        t0 = time.perf_counter()
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
        costs.append(time.perf_counter() - t0)
    return costs


def assert_microseconds(costs: list[float]) -> None:
    # Generous for a loaded 2-core CI box; an export blocking the producer would cost seconds.
    assert statistics.median(costs) < 200e-6, f"median {statistics.median(costs) * 1e6:.0f} µs"
    assert statistics.mean(costs) < 1e-3, f"mean {statistics.mean(costs) * 1e6:.0f} µs"


def failure_warnings(caplog, endpoint: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "spanspec.export"
        and "failed. Training continues" in r.getMessage()
        and endpoint in r.getMessage()
    ]


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dead_endpoint(clean_env, spec, caplog, protocol):
    caplog.set_level(logging.INFO)
    clean_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    with dead_endpoint() as endpoint:
        handle = start_otlp(clean_env, spec, endpoint, protocol)
        assert_microseconds(produce(2_000))
        assert wait_for(lambda: failure_warnings(caplog, endpoint.split("//")[1]), 6)
        assert_microseconds(produce(2_000))
        t0 = time.monotonic()
        stats = handle.shutdown(2)
        assert time.monotonic() - t0 < 2.5
    assert stats.spans_ended == 4_000 and stats.spans_exported == 0
    assert stats.spans_lost == 4_000
    assert len(failure_warnings(caplog, endpoint.split("//")[1])) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_black_hole_endpoint(clean_env, spec, protocol):
    # The exporter's own timeout stays at its 10 s default: the bound is shutdown's, not its.
    with BlackHole() as hole:
        handle = start_otlp(clean_env, spec, hole.endpoint, protocol)
        assert_microseconds(produce(2_000))
        time.sleep(0.5)  # an export is now stuck on the silent socket
        assert_microseconds(produce(2_000))
        t0 = time.monotonic()
        stats = handle.shutdown(1.5)
        elapsed = time.monotonic() - t0
    assert elapsed < 2.0, elapsed
    assert stats.shutdown_timed_out
    assert stats.spans_ended == 4_000 and stats.spans_exported == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receiver_killed_mid_run(clean_env, spec, caplog, protocol):
    caplog.set_level(logging.INFO)
    clean_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    rx = OtlpReceiver().start()
    endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint
    where = endpoint.split("//")[1]
    handle = start_otlp(clean_env, spec, endpoint, protocol)
    produce(500)
    assert handle.force_flush(5)
    assert len(rx.spans()) == 500
    rx.stop()
    assert_microseconds(produce(2_000))
    assert wait_for(lambda: failure_warnings(caplog, where), 6)
    t0 = time.monotonic()
    stats = handle.shutdown(2)
    assert time.monotonic() - t0 < 2.5
    assert stats.spans_ended == 2_500 and stats.spans_exported == 500
    assert stats.spans_lost == 2_000
    assert len(failure_warnings(caplog, where)) == 1
    assert any("lost 2000 of 2500" in r.getMessage() for r in caplog.records)


def test_shutdown_telemetry_keeps_the_configured_bound_against_a_black_hole(clean_env, tmp_path):
    from nemo_rl import telemetry

    saved = dict(os.environ)  # the driver writes NEMO_RL_OTEL_* for its workers
    try:
        with BlackHole() as hole:
            clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hole.endpoint)
            block = {"span_groups": "all", "logs_enabled": True, "shutdown_timeout_s": 1}
            telemetry.init_telemetry_driver(
                telemetry.TelemetryConfig(**block), telemetry.RunIdentity("grpo", run_dir=tmp_path)
            )
            assert_microseconds(produce(1_000))
            telemetry.record_metrics({"loss": 0.5}, prefix="train")
            logging.getLogger("test.faults").warning("to a black hole")
            time.sleep(0.5)  # an export is now stuck on the silent socket
            t0 = time.monotonic()
            stats = telemetry.shutdown_telemetry()  # no argument: the setting's bound
            elapsed = time.monotonic() - t0
    finally:
        telemetry.shutdown_telemetry(1)
        os.environ.clear()
        os.environ.update(saved)
    assert elapsed < 1.5, elapsed
    assert stats is not None and stats.shutdown_timed_out
    assert stats.spans_ended == 1_000 and stats.spans_exported == 0


EXIT_WITH_BLACK_HOLE = textwrap.dedent(
    """
    import os, sys, time
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = sys.argv[1]
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    s = load_settings({"shutdown_timeout_s": 1.5}, env=os.environ)
    h = export.setup(s)  # registers the bounded flush at exit
    spanspec.activate(spanspec.load(), "all", tracer_provider=h.tracer_provider, env_var=None)
    for i in range(1000):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    time.sleep(0.3)
    print("exiting", flush=True)
    """
)


def test_process_exit_is_bounded_against_a_black_hole(clean_env):
    with BlackHole() as hole:
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", EXIT_WITH_BLACK_HOLE, hole.endpoint],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=30,
        )
        elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    assert "exiting" in done.stdout
    assert elapsed < 8, elapsed  # interpreter start + imports + 1.5 s flush bound


SIGTERM_CHILD = textwrap.dedent(
    """
    import os, sys, time
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "600000"  # nothing leaves before the signal
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    h = export.setup(load_settings({"file_dir": sys.argv[1]}, env={}), handle_sigterm=True)
    spanspec.activate(spanspec.load(), "all", tracer_provider=h.tracer_provider, env_var=None)
    for i in range(3):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 9}):
        print("ready", flush=True)
        time.sleep(60)
    """
)


def spans_in(folder: Path) -> list[dict]:
    path = folder / "traces.jsonl"
    if not path.exists():
        return []
    return [
        s
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]


def attrs(item: dict) -> dict:
    """The attributes of an OTLP-JSON span or resource, as a plain dict."""
    return attributes(item.get("attributes", []))


def test_sigterm_flushes_before_the_process_exits(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert child.stdout.readline().strip() == "ready"
    assert spans_in(tmp_path) == []
    child.send_signal(signal.SIGTERM)
    assert child.wait(15) == -signal.SIGTERM  # it still dies by the signal
    spans = spans_in(tmp_path)
    assert sorted(s["name"] for s in spans) == ["rl.grpo.step"] + ["rl.worker.train_microbatch"] * 3
    (step,) = [s for s in spans if s["name"] == "rl.grpo.step"]
    assert attrs(step)["spanspec.truncated"] is True
    assert (tmp_path / "metrics.jsonl").exists()


FORK = textwrap.dedent(
    """
    import os, sys
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "600000"
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    import logging
    h = export.setup(load_settings({"file_dir": sys.argv[1], "logs_enabled": True}, env={}))
    counter = h.meter_provider.get_meter("fork.test").create_counter("fork.test.count")
    spanspec.activate(spanspec.load(), "all", tracer_provider=h.tracer_provider, env_var=None)
    for i in range(3):  # queued in the parent, not yet exported
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    outer = spanspec.span("rl.grpo.step", **{"rl.iteration": 1})
    outer.__enter__()  # open across the fork
    pid = os.fork()
    if pid == 0:
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": 100}):
            pass
        counter.add(1, {"who": "child"})
        logging.getLogger("fork.test").warning("from the child")
        stats = h.shutdown(5)
        print("child", stats.spans_ended, stats.spans_exported, stats.truncated, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    counter.add(1, {"who": "parent"})
    logging.getLogger("fork.test").warning("from the parent")
    outer.__exit__(None, None, None)
    stats = h.shutdown(5)
    print("parent", stats.spans_ended, stats.spans_exported, stats.truncated, flush=True)
    """
)


def test_a_forked_child_does_not_re_export_its_parents_spans(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FORK, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:2]) == ["child 1 1 0", "parent 4 4 0"]
    spans = spans_in(tmp_path)
    batches = sorted(attrs(s).get("rl.micro_batch", -1) for s in spans)
    assert batches == [-1, 0, 1, 2, 100]  # every span exactly once; the step by the parent only
    (step,) = [s for s in spans if s["name"] == "rl.grpo.step"]
    assert "spanspec.truncated" not in attrs(step)
    # each process exports as itself
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    pids = {}
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            pid = attrs(rs["resource"])["process.pid"]
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    pids[attrs(s).get("rl.micro_batch", -1)] = pid
    assert pids[100] != pids[0] and pids[0] == pids[-1]
    # metrics and logs too: the child's points and records carry the child's pid
    metric_pids = {}
    for point in metric_points(tmp_path / "metrics.jsonl")["fork.test.count"]:
        metric_pids.setdefault(point["attrs"]["who"], set()).add(point["resource"]["process.pid"])
    assert metric_pids == {"child": {pids[100]}, "parent": {pids[0]}}
    log_pids = {}
    for line in (tmp_path / "logs.jsonl").read_text().splitlines():
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for record in sl["logRecords"]:
                    body = record["body"].get("stringValue", "")
                    log_pids[body] = attrs(rl["resource"])["process.pid"]
    assert log_pids["from the child"] == pids[100]
    assert log_pids["from the parent"] == pids[0]
