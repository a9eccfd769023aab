"""The embedded default exporter: OTLP/JSON lines, one export request per line.

``traces.jsonl``, ``metrics.jsonl`` and ``logs.jsonl`` hold the official OTLP protobuf requests
(built by ``opentelemetry.exporter.otlp.proto.common``) in the OTLP/JSON encoding: lowerCamelCase
keys, enums as integers, trace and span ids as hex. An OpenTelemetry Collector's ``otlpjsonfile``
receiver can replay them.

Each line goes out in one ``os.write`` on a file opened ``O_APPEND``, so several processes can
share a file and a process killed mid-run loses at most the line being written. A file found
ending mid-line (a run killed while writing, resumed into the same folder) is first closed with a
newline, so the torn line stays the only one lost; so is a line torn by a failed write (disk
full) before the next one is written. Imported by :mod:`spanspec.export` only, when
telemetry is on.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from spanspec.files import not_regular_output

__all__ = [
    "FileLogExporter",
    "FileMetricExporter",
    "FileSpanExporter",
    "JsonLinesFile",
    "to_otlp_json",
]

_ID_KEYS = frozenset(("traceId", "spanId", "parentSpanId"))


def _hex_ids(node: Any) -> None:
    """Rewrite protobuf-JSON base64 ids to the hex OTLP/JSON wants, in place, everywhere."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            elif isinstance(value, dict | list):
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict | list):
                _hex_ids(item)


def to_otlp_json(message: Message) -> dict[str, Any]:
    """Return an OTLP protobuf message as an OTLP/JSON dict (hex ids, integer enums)."""
    data = MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(data)
    return data


class JsonLinesFile:
    """An append-only file of JSON lines, shared safely by threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO put where the file goes fails here instead of blocking start-up.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK
        self._fd: int | None = os.open(self.path, flags, 0o644)
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            self._fd = None
            raise OSError(f"{self.path}: {not_regular_output(self.path)}")
        if _ends_mid_line(self.path):
            os.write(self._fd, b"\n")  # end the torn line, or it swallows our first one
        self._lock = threading.Lock()
        self.lines_written = 0
        # True after a write that failed part-way (disk full): the next line starts with the
        # newline that ends the torn one, so a good batch is never glued onto it and lost.
        self._torn = False
        # A fork while another thread holds the lock would leave the child's copy locked forever.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _reset_lock(ref))

    def write(self, message: Message) -> None:
        """Append ``message`` as one OTLP/JSON line.

        Raises:
            OSError: when the file cannot be written (the exporter reports a failure).
        """
        line = json.dumps(to_otlp_json(message), separators=(",", ":")) + "\n"
        encoded = line.encode("utf-8")
        with self._lock:
            if self._fd is None:
                raise OSError(f"{self.path} is closed")
            data = memoryview(b"\n" + encoded if self._torn else encoded)
            while data:
                written = os.write(self._fd, data)  # OSError: the guard counts the batch lost
                if written:
                    self._torn = data[written - 1 : written] != b"\n"
                data = data[written:]
            self.lines_written += 1

    def close(self) -> None:
        """Close the file; later writes fail."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _ends_mid_line(path: Path) -> bool:
    """Whether ``path`` is non-empty and its last byte is not a newline."""
    try:
        with path.open("rb") as file:
            if file.seek(0, os.SEEK_END) == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except OSError:
        return False


def _reset_lock(ref: weakref.ref[JsonLinesFile]) -> None:
    file = ref()
    if file is not None:
        file._lock = threading.Lock()


class FileSpanExporter(SpanExporter):
    """Spans to ``<folder>/traces.jsonl`` (or ``<folder>/<name>``)."""

    def __init__(self, folder: str | os.PathLike[str], name: str = "traces.jsonl") -> None:
        self.file = JsonLinesFile(Path(folder) / name)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.file.write(encode_spans(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class FileMetricExporter(MetricExporter):
    """Metrics to ``<folder>/metrics.jsonl`` or ``<folder>/<name>`` (cumulative temporality, as the SDK defaults)."""

    def __init__(self, folder: str | os.PathLike[str], name: str = "metrics.jsonl") -> None:
        super().__init__()
        self.file = JsonLinesFile(Path(folder) / name)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        request = encode_metrics(metrics_data)
        if request.resource_metrics:
            self.file.write(request)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.file.close()


class FileLogExporter(LogRecordExporter):
    """Log records to ``<folder>/logs.jsonl`` (or ``<folder>/<name>``)."""

    def __init__(self, folder: str | os.PathLike[str], name: str = "logs.jsonl") -> None:
        self.file = JsonLinesFile(Path(folder) / name)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.file.write(encode_logs(batch))
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        self.file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
