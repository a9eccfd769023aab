"""Export throughput, memory and shutdown time of the spanspec pipeline.

    python bench/bench_export.py              # ~1 minute; prints a table
    python bench/bench_export.py --million    # adds 1,000,000 spans through file and OTLP/gRPC
    python bench/bench_export.py --spans 20000  # a quicker run

Each case runs in a fresh Python process so its peak memory is its own:

- ``queue``: pre-built spans handed to a BatchSpanProcessor whose exporter returns at once, with
  the SDK's default queue (2,048) and with ours: the share of spans a fast producer loses.
- ``file`` / ``grpc`` / ``http``: spans through ``spanspec.span`` into the embedded file exporter
  and into an in-process OTLP receiver on 127.0.0.1 (which shares the GIL, so these numbers are a
  floor). Producer cost per span, spans per second end to end (until every span is exported or
  dropped), spans lost, and the process's peak RSS above its start.
- ``black hole``: ``shutdown_telemetry()`` (default 5 s bound) with the collector a socket that
  accepts and never answers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_kib(field: str = "VmHWM") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _clean_env() -> None:
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            del os.environ[key]


# -- cases (each runs in its own process) ---------------------------------------------------------


def case_queue(n: int) -> dict:
    import logging

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from spanspec.export import SCHEDULE_DELAY_MS, SPAN_BATCH_SIZE, SPAN_QUEUE_SIZE

    logging.disable(logging.WARNING)

    class Instant(SpanExporter):
        exported = 0

        def export(self, spans):
            self.exported += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    span = TracerProvider(shutdown_on_exit=False).get_tracer("b").start_span("x")
    span.end()
    out = {}
    for label, kwargs in (
        ("sdk default", {}),
        (
            "spanspec",
            {
                "max_queue_size": SPAN_QUEUE_SIZE,
                "max_export_batch_size": SPAN_BATCH_SIZE,
                "schedule_delay_millis": SCHEDULE_DELAY_MS,
            },
        ),
    ):
        exporter = Instant()
        bsp = BatchSpanProcessor(exporter, **kwargs)
        t0 = time.perf_counter()
        for _ in range(n):
            bsp.on_end(span)
        produce = time.perf_counter() - t0
        bsp.shutdown()
        out[label] = {"us": produce / n * 1e6, "lost": (n - exporter.exported) / n}
    return out


def case_pipeline(kind: str, n: int) -> dict:
    _clean_env()
    rx = None
    if kind in ("grpc", "http"):
        from tests.otlp_receiver import OtlpReceiver

        rx = OtlpReceiver(kind == "grpc", kind == "http", keep=False).start()
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = (
            rx.grpc_endpoint if kind == "grpc" else rx.http_endpoint
        )
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc" if kind == "grpc" else "http/protobuf"
    import tempfile

    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings

    folder = tempfile.mkdtemp(prefix="bench_export_")
    settings = load_settings({"file_dir": folder, "metrics_enabled": False}, env=os.environ)
    base = _rss_kib("VmRSS")
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spanspec.load(), "all", tracer_provider=handle.tracer_provider, env_var=None)
    t0 = time.perf_counter()
    for i in range(n):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    produce = time.perf_counter() - t0
    stats = handle.shutdown(600)
    total = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in Path(folder).glob("*.jsonl"))
    received = None
    if rx is not None:
        rx.stop()
        received = rx.span_count
    return {
        "received": received,
        "produce_us": produce / n * 1e6,
        "spans_per_s": stats.spans_exported / total,
        "exported": stats.spans_exported,
        "lost": stats.spans_lost,
        "peak_mib": (_rss_kib() - base) / 1024,
        "file_mib": size / 2**20,
    }


def case_black_hole(protocol: str) -> dict:
    _clean_env()
    from tests.otlp_receiver import BlackHole

    with BlackHole() as hole:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = hole.endpoint
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
        import spanspec
        from nemo_rl import telemetry

        telemetry.init_telemetry_driver(
            telemetry.TelemetryConfig(span_groups="all"), telemetry.RunIdentity("grpo")
        )
        for i in range(5_000):
            with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
                pass
        time.sleep(1.5)  # an export is under way, stuck on the silent socket
        t0 = time.perf_counter()
        stats = telemetry.shutdown_telemetry()  # default bound: 5 s
        elapsed = time.perf_counter() - t0
    return {"shutdown_s": elapsed, "lost": stats.spans_lost if stats else None}


# -- driver ---------------------------------------------------------------------------------------


def _run_case(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--case", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"case {args} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans per pipeline case")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 spans (file, gRPC)")
    parser.add_argument("--case", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.case:
        name, *rest = args.case
        if name == "queue":
            result = case_queue(int(rest[0]))
        elif name == "pipeline":
            result = case_pipeline(rest[0], int(rest[1]))
        else:
            result = case_black_hole(rest[0])
        print(json.dumps(result))
        return

    started = time.perf_counter()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    queue = _run_case("queue", "500000")
    print("fast producer, exporter returns at once (500,000 pre-built spans into on_end):")
    print(f"  {'processor':14} {'µs/span':>8} {'lost':>7}")
    for label, row in queue.items():
        print(f"  {label:14} {row['us']:8.2f} {row['lost']:7.1%}")

    runs = [("file", args.spans), ("grpc", args.spans), ("http", args.spans)]
    if args.million:
        runs += [("file", 1_000_000), ("grpc", 1_000_000)]
    print("\nspanspec.span -> BatchSpanProcessor -> exporter (producer as fast as it can go):")
    header = (
        f"  {'exporter':9} {'spans':>9} {'µs/span':>8} {'spans/s':>9} {'exported':>9} "
        f"{'received':>9} {'lost':>8} {'peak MiB':>9} {'file MiB':>9}"
    )
    print(header)
    for kind, n in runs:
        r = _run_case("pipeline", kind, str(n))
        received = "-" if r["received"] is None else f"{r['received']:,}"
        print(
            f"  {kind:9} {n:9,} {r['produce_us']:8.1f} {r['spans_per_s']:9,.0f} "
            f"{r['exported']:9,} {received:>9} {r['lost']:8,} {r['peak_mib']:9.1f} "
            f"{r['file_mib']:9.1f}",
            flush=True,
        )

    print("\nshutdown_telemetry() against a black-hole collector (default bound 5 s):")
    print(f"  {'protocol':14} {'seconds':>8} {'spans lost':>11}")
    for protocol in ("grpc", "http/protobuf"):
        r = _run_case("black_hole", protocol)
        print(f"  {protocol:14} {r['shutdown_s']:8.2f} {r['lost']:11,}", flush=True)
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
