"""An in-process OTLP receiver for tests: gRPC and HTTP/protobuf, on 127.0.0.1 ephemeral ports.

    with OtlpReceiver() as rx:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.grpc_endpoint   # or rx.http_endpoint
        ...                                                               # export something
        spans = rx.wait_for_spans(3)

It implements the collector's ``TraceService``, ``MetricsService`` and ``LogsService`` with
``grpcio`` and ``opentelemetry-proto``, and ``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs``
with ``http.server`` (protobuf or JSON bodies, gzip or not). Every request is kept, with the
protocol it came by and its headers (gRPC metadata or HTTP headers, keys in lower case). Also
here: :class:`BlackHole` (accepts connections, never answers) and :func:`dead_endpoint` (a port
that refuses connections).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = ["BlackHole", "OtlpReceiver", "ReceivedSpan", "attrs", "dead_endpoint"]

_REQUESTS = {
    "traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
    "logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
}


def attrs(key_values: Any) -> dict[str, Any]:
    """Return a protobuf ``KeyValue`` list as a plain dict of Python values."""
    out = {}
    for kv in key_values:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind) if kind else None
        if kind == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        out[kv.key] = value
    return out


@dataclass
class ReceivedSpan:
    """One received span with its resource and scope, ids as hex."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    protocol: str
    start_ns: int
    end_ns: int


class OtlpReceiver:
    """Collects OTLP export requests over gRPC and HTTP. ``start()``/``stop()`` or ``with``."""

    def __init__(
        self,
        grpc_enabled: bool = True,
        http_enabled: bool = True,
        keep: bool = True,
        refuse: tuple[str, ...] = (),
    ) -> None:
        """``keep=False`` counts spans (``span_count``) instead of keeping requests (benchmarks).
        ``refuse`` names signals this backend does not take, as Phoenix does metrics: HTTP 405,
        and gRPC UNIMPLEMENTED (no service registered)."""
        self.refuse = frozenset(refuse)
        self._grpc_enabled = grpc_enabled
        self._http_enabled = http_enabled
        self._keep = keep
        self.span_count = 0
        self.requests: list[tuple[str, str, Any]] = []  # (signal, protocol, request)
        self.headers: list[tuple[str, str, dict[str, str]]] = []  # (signal, protocol, headers)
        self._cond = threading.Condition()
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self.grpc_port = 0
        self.http_port = 0

    # -- life cycle --

    def start(self) -> OtlpReceiver:
        """Start the servers on free 127.0.0.1 ports; return self."""
        if self._grpc_enabled:
            self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            if "traces" not in self.refuse:
                trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self._grpc)
            if "metrics" not in self.refuse:
                metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
                    _Metrics(self), self._grpc
                )
            if "logs" not in self.refuse:
                logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(self), self._grpc)
            self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
            self._grpc.start()
        if self._http_enabled:
            self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            self._http.daemon_threads = True
            self.http_port = self._http.server_address[1]
            threading.Thread(target=self._http.serve_forever, daemon=True, name="otlp-http").start()
        return self

    def stop(self) -> None:
        """Stop both servers (at once; in-flight calls are cancelled)."""
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait(5)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # -- what arrived --

    def _add(
        self, signal_name: str, protocol: str, request: Any, headers: dict[str, str] | None = None
    ) -> None:
        with self._cond:
            self.headers.append((signal_name, protocol, headers or {}))
            if signal_name == "traces":
                self.span_count += sum(
                    len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
                )
            if self._keep:
                self.requests.append((signal_name, protocol, request))
            self._cond.notify_all()

    def of(self, signal_name: str) -> list[tuple[str, Any]]:
        """Return ``(protocol, request)`` for every request of ``signal_name`` so far."""
        with self._cond:
            return [(p, r) for s, p, r in self.requests if s == signal_name]

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, flattened."""
        out = []
        for protocol, request in self.of("traces"):
            for rs in request.resource_spans:
                resource = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(
                            ReceivedSpan(
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                attrs(s.attributes),
                                resource,
                                ss.scope.name,
                                protocol,
                                s.start_time_unix_nano,
                                s.end_time_unix_nano,
                            )
                        )
        return out

    def metric_points(self) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
        """``{metric name: [(data point, resource attributes), ...]}`` over every request."""
        out: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
        for _, request in self.of("metrics"):
            for rm in request.resource_metrics:
                resource = attrs(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for point in getattr(m, kind).data_points:
                            out.setdefault(m.name, []).append((point, resource))
        return out

    def log_records(self) -> list[Any]:
        """Every log record received so far."""
        return [
            lr
            for _, request in self.of("logs")
            for rl in request.resource_logs
            for sl in rl.scope_logs
            for lr in sl.log_records
        ]

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` holds (re-checked on every request); return whether it did."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def wait_for_spans(self, count: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans arrived; return them all (maybe fewer on timeout)."""
        self.wait_until(lambda: len(self._spans_unlocked()) >= count, timeout)
        return self.spans()

    def _spans_unlocked(self) -> list[Any]:
        return [
            s
            for sig, _, r in self.requests
            if sig == "traces"
            for rs in r.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]


def _metadata(context: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx._add("traces", "grpc", request, _metadata(context))
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx._add("metrics", "grpc", request, _metadata(context))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx._add("logs", "grpc", request, _metadata(context))
        return logs_service_pb2.ExportLogsServiceResponse()


def _handler(rx: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            signal_name = {
                "/v1/traces": "traces",
                "/v1/metrics": "metrics",
                "/v1/logs": "logs",
            }.get(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if signal_name is None or signal_name in rx.refuse:
                self.send_response(404 if signal_name is None else 405)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request_type, response_type = _REQUESTS[signal_name]
            request = request_type()
            if "json" in self.headers.get("Content-Type", ""):
                json_format.Parse(body, request)
            else:
                request.ParseFromString(body)
            headers = {k.lower(): v for k, v in self.headers.items()}
            rx._add(signal_name, "http", request, headers)
            reply = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="black-hole")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)  # read nothing, answer nothing

    def __enter__(self) -> BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self._held:
            conn.close()
        self._sock.close()


@contextmanager
def dead_endpoint() -> Iterator[str]:
    """Yield ``http://127.0.0.1:<port>`` for a port bound but not listening: connections are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def free_port() -> int:
    """Return a port that was free a moment ago (for servers that cannot report their own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
