"""OTLP/HTTP metrics in, Prometheus remote write out: the stack's path for metrics sent by OTLP.

    <stack venv>/bin/python scripts/metrics_bridge.py --listen 127.0.0.1:9201 \
        --remote-write http://127.0.0.1:9090/api/v1/write \
        --label rl.run_id --label rl.worker.group --label rl.worker.rank

rotel has no exporter Prometheus 2.42 takes, so it sends the metrics it receives here (its OTLP
exporter, HTTP/protobuf), and this turns each request into one remote-write push with
spanspec's own translation (``spanspec.export.prometheus``): the same series names and the same
run, role and rank labels as a process that pushes itself. Each process's points keep the time
they were collected, so a batch rotel retries lands where it belongs.

The answer tells rotel what to do: 200 once Prometheus took the points; 503 while Prometheus
cannot be reached (rotel retries); 400 when Prometheus refused them (logged here, and
``observability_stack.sh status`` shows it). Runs in the stack's venv, on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spanspec from this checkout

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from spanspec.export.prometheus import (
    RemoteWriteError,
    RemoteWriteExporter,
    encode_write_request,
    push,
)

PUSH_TIMEOUT_S = 10.0


def _value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as the SDK holds attribute values."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if kind in (None, "kvlist_value"):
        return str(v) if kind else None
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def _number(p: Any) -> NumberDataPoint:
    value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
    return NumberDataPoint(_attrs(p.attributes), p.start_time_unix_nano, p.time_unix_nano, value)


def _histogram_point(p: Any) -> HistogramDataPoint:
    return HistogramDataPoint(
        _attrs(p.attributes),
        p.start_time_unix_nano,
        p.time_unix_nano,
        p.count,
        p.sum,
        list(p.bucket_counts),
        list(p.explicit_bounds),
        p.min,
        p.max,
    )


def _metric(m: Any) -> Metric | None:
    """One OTLP metric in the SDK's form; None for a kind Prometheus's translation has no use
    for here (exponential histograms, summaries: no process of ours makes them)."""
    kind = m.WhichOneof("data")
    if kind == "gauge":
        data: Any = Gauge([_number(p) for p in m.gauge.data_points])
    elif kind == "sum":
        data = Sum(
            [_number(p) for p in m.sum.data_points],
            AggregationTemporality(m.sum.aggregation_temporality),
            m.sum.is_monotonic,
        )
    elif kind == "histogram":
        data = Histogram(
            [_histogram_point(p) for p in m.histogram.data_points],
            AggregationTemporality(m.histogram.aggregation_temporality),
        )
    else:
        return None
    return Metric(m.name, m.description, m.unit, data)


def _times(m: Metric) -> list[int]:
    return [p.time_unix_nano for p in m.data.data_points]


class Translators:
    """One translation per process (resource): the Prometheus exporter's translation keeps the
    first resource it sees for ``target_info``, so processes must not share one."""

    def __init__(self, labels: list[str]) -> None:
        self.labels = labels
        self._by_resource: dict[frozenset[tuple[str, Any]], RemoteWriteExporter] = {}

    def __call__(self, resource: Resource) -> RemoteWriteExporter:
        key = frozenset(resource.attributes.items())
        if key not in self._by_resource:
            # The URL is unused: this exporter only translates (the bridge pushes itself).
            self._by_resource[key] = RemoteWriteExporter("http://unused", self.labels)
        return self._by_resource[key]


def write_request(request: ExportMetricsServiceRequest, translators: Translators) -> bytes:
    """The remote-write body for one OTLP request: each resource's (one process's export) series
    stamped with the time its points were collected."""
    body = bytearray()
    for rm in request.resource_metrics:
        scopes = []
        for sm in rm.scope_metrics:
            metrics = [x for x in map(_metric, sm.metrics) if x is not None]
            scope = InstrumentationScope(sm.scope.name, sm.scope.version or None)
            scopes.append(ScopeMetrics(scope, metrics, sm.schema_url))
        resource = Resource(_attrs(rm.resource.attributes))
        data = MetricsData([ResourceMetrics(resource, scopes, "")])
        times = [t for s in scopes for m in s.metrics for t in _times(m)]
        stamp_ms = max(times) // 1_000_000 if times and max(times) else int(time.time() * 1000)
        # A message's repeated field concatenates: one WriteRequest with every resource's series.
        body += encode_write_request(translators(resource).series(data), stamp_ms)
    return bytes(body)


def serve(listen: str, remote_write: str, labels: list[str]) -> None:
    host, port = listen.rsplit(":", 1)
    translators = Translators(labels)
    lock = threading.Lock()  # the translation keeps state per call

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            try:
                if encoding == "gzip":
                    raw = gzip.decompress(raw)
                elif encoding == "deflate":
                    raw = zlib.decompress(raw)
                request = ExportMetricsServiceRequest.FromString(raw)
                with lock:
                    body = write_request(request, translators)
            except Exception as exc:  # a body that is not OTLP/protobuf metrics
                self._answer(400, f"not OTLP/HTTP protobuf metrics: {exc}")
                return
            try:
                if body:
                    push(remote_write, body, PUSH_TIMEOUT_S)
            except RemoteWriteError as exc:
                code = 400 if exc.refused else 503
                self._answer(code, f"Prometheus {remote_write}: {exc}")
                return
            self._answer(200, None)

        def _answer(self, code: int, problem: str | None) -> None:
            if problem:
                print(f"metrics-bridge: ERROR: {problem}", file=sys.stderr, flush=True)
            payload = (
                ExportMetricsServiceResponse().SerializeToString()
                if problem is None
                else problem.encode()
            )
            self.send_response(code)
            self.send_header(
                "Content-Type", "application/x-protobuf" if problem is None else "text/plain"
            )
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per problem (above), none per request

    server = ThreadingHTTPServer((host, int(port)), Handler)
    print(f"metrics-bridge: OTLP/HTTP metrics on {listen} -> {remote_write}", flush=True)
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", required=True, help="host:port, e.g. 127.0.0.1:9201")
    parser.add_argument("--remote-write", required=True, help="Prometheus's /api/v1/write URL")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        help="a resource attribute every series carries as a label (repeat)",
    )
    args = parser.parse_args(argv)
    serve(args.listen, args.remote_write, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
