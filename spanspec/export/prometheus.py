"""The ``prometheus`` exporter: this process's metrics to Prometheus, pushed or served.

- **Push** (``prometheus_remote_write_url`` set): every export of the periodic reader, and the
  final one at shutdown, is sent to a Prometheus remote-write receiver (``prometheus
  --web.enable-remote-write-receiver``) with the time it was taken. Nothing has to find the
  process, so any number of processes per node deliver, and the last point of a run lands after
  the process is gone. A failed push is a failed export: counted, warned once, and in the run's
  ``dropped`` figure.
- **Pull** (no URL): ``/metrics`` on 127.0.0.1, on the first free one of :data:`PORTS_TRIED`
  ports from ``prometheus_port`` (the driver starts first, so it gets the base). What changed
  after the last scrape before the process exits is never seen.

Both name series as ``opentelemetry-exporter-prometheus`` does (``app.loss`` -> ``app_loss``,
a histogram's ``_bucket``/``_sum``/``_count``, ``target_info``), and both
copy the caller's ``label_attributes`` (resource attributes such as a run id, a role and a rank)
onto every series as labels, so that two runs, or two processes, never share a series.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from prometheus_client import CollectorRegistry, start_http_server

from spanspec import runtime
from spanspec.export._guards import redact_metrics
from spanspec.settings import SettingsError

__all__ = [
    "PORTS_TRIED",
    "PrometheusServer",
    "RemoteWriteError",
    "RemoteWriteExporter",
    "encode_write_request",
    "push",
    "start",
    "with_labels",
]

PORTS_TRIED = 16
_log = logging.getLogger("spanspec.export")
_PUSH_TIMEOUT_S = 5.0  # one push; the shutdown's own bound (shutdown_timeout_s) still applies


@dataclass
class PrometheusServer:
    """A started ``/metrics`` endpoint: the SDK reader to give the meter provider, and the server."""

    reader: Any
    server: Any
    thread: Any
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def shutdown(self) -> None:
        """Stop serving (the reader is shut down by its meter provider)."""
        self.server.shutdown()
        self.server.server_close()


def with_labels(data: MetricsData, keys: Sequence[str]) -> MetricsData:
    """Return ``MetricsData`` ``data`` with the resource attributes named in ``keys`` added to
    every data point's attributes (a point's own attribute of the same name wins), so that they
    become labels of each series. Resources without any of them are passed as they are."""
    if not keys:
        return data
    resource_metrics = []
    for rm in data.resource_metrics:
        extra = {k: rm.resource.attributes[k] for k in keys if k in rm.resource.attributes}
        if extra:
            rm = dataclasses.replace(
                rm,
                scope_metrics=[
                    dataclasses.replace(
                        sm,
                        metrics=[
                            dataclasses.replace(
                                m,
                                data=dataclasses.replace(
                                    m.data,
                                    data_points=[
                                        dataclasses.replace(
                                            p, attributes={**extra, **(p.attributes or {})}
                                        )
                                        for p in m.data.data_points
                                    ],
                                ),
                            )
                            for m in sm.metrics
                        ],
                    )
                    for sm in rm.scope_metrics
                ],
            )
        resource_metrics.append(rm)
    return dataclasses.replace(data, resource_metrics=resource_metrics)


def start(
    base_port: int,
    tries: int = PORTS_TRIED,
    setting: str = "prometheus_port",
    label_attributes: Sequence[str] = (),
) -> PrometheusServer:
    """Serve a fresh registry's metrics on the first free port from ``base_port``.

    ``setting`` is how the message tells a person to change the port (the variable and key).

    Returns:
        The running :class:`PrometheusServer`.

    Raises:
        SettingsError: naming ``setting`` when none of the ports is free.
    """
    labels = tuple(label_attributes)

    class RedactingReader(PrometheusMetricReader):
        """Serves ``target_info`` with sensitive resource values redacted, as every exporter,
        and the label attributes on every series."""

        def _receive_metrics(self, metrics_data: Any, *args: Any, **kwargs: Any) -> None:
            if metrics_data is not None:
                metrics_data = redact_metrics(metrics_data, runtime.sensitive_keys())
                metrics_data = with_labels(metrics_data, labels)
            super()._receive_metrics(metrics_data, *args, **kwargs)

    registry = CollectorRegistry(auto_describe=True)  # one per process, not the global one
    last: OSError | None = None
    for port in range(base_port, base_port + tries):
        try:
            server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        except OSError as exc:
            last = exc
            continue
        return PrometheusServer(RedactingReader(registry=registry), server, thread, port)
    raise SettingsError(
        [
            f"prometheus_port={base_port}: no free port among {base_port}-{base_port + tries - 1} "
            f"on 127.0.0.1 ({last.strerror if last else 'in use'}); set {setting} to a free range"
        ]
    )


# -- push: Prometheus remote write 1.0 --------------------------------------------------------


class RemoteWriteError(Exception):
    """A push Prometheus did not take: the message says what it answered, and the fix."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        """True when Prometheus answered and said no (an HTTP error), False when unreachable."""


class _Translator(PrometheusMetricReader):
    """Used only for its translation of ``MetricsData`` into ``prometheus_client`` families:
    the names and labels the pull exporter serves."""

    def __init__(self) -> None:
        super().__init__(registry=CollectorRegistry(auto_describe=False))

    def collect(self, timeout_millis: float = 10_000) -> None:
        """Fed by :meth:`families`, never by a meter provider: nothing to collect."""

    def families(self, data: MetricsData) -> list[Any]:
        self._receive_metrics(data)
        return list(self._registry.collect())


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_write_request(
    series: Iterable[tuple[Mapping[str, str], float]], timestamp_ms: int
) -> bytes:
    """Return the protobuf of a remote-write 1.0 ``WriteRequest``, uncompressed: one sample per
    series, at ``timestamp_ms``, labels sorted by name as Prometheus requires.

    The message (``prometheus/prompb``): ``WriteRequest.timeseries = 1``; ``TimeSeries.labels =
    1``, ``samples = 2``; ``Label.name = 1``, ``value = 2``; ``Sample.value = 1`` (double),
    ``timestamp = 2`` (int64, milliseconds).
    """
    out = bytearray()
    stamp = _varint(2 << 3) + _varint(timestamp_ms)
    for labels, value in series:
        body = bytearray()
        for name in sorted(labels):
            body += _field(1, _field(1, name.encode()) + _field(2, labels[name].encode()))
        body += _field(2, _varint(1 << 3 | 1) + struct.pack("<d", value) + stamp)
        out += _field(1, bytes(body))
    return bytes(out)


def push(url: str, write_request: bytes, timeout_s: float, compress: Any = None) -> None:
    """POST the (uncompressed) remote-write ``write_request`` to ``url``, snappy-compressed with
    ``compress`` (default: cramjam's raw snappy).

    Raises:
        RemoteWriteError: Prometheus unreachable (``.refused`` False), or it answered an HTTP
            error (``.refused`` True: sending the same again will not help).
    """
    if compress is None:
        import cramjam

        compress = cramjam.snappy.compress_raw
    request = urllib.request.Request(
        url,
        data=bytes(compress(write_request)),
        method="POST",
        headers={
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
            "User-Agent": "spanspec",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").strip()
        hint = (
            "; start Prometheus with --web.enable-remote-write-receiver" if exc.code == 404 else ""
        )
        raise RemoteWriteError(f"HTTP {exc.code}: {detail}{hint}", refused=True) from None
    except (OSError, ValueError) as exc:
        raise RemoteWriteError(f"{getattr(exc, 'reason', exc)}") from None


class RemoteWriteExporter(MetricExporter):
    """Pushes every export to a Prometheus remote-write URL (snappy-compressed protobuf, remote
    write 1.0), each sample stamped with the time of the export and carrying the resource
    attributes in ``label_attributes`` as labels. Cumulative temporality, as Prometheus expects.

    ``export()`` raises :class:`RemoteWriteError` when Prometheus cannot be reached or does not
    take the push; the guard around every exporter counts it and warns once.
    """

    def __init__(self, url: str, label_attributes: Sequence[str] = ()) -> None:
        cumulative = AggregationTemporality.CUMULATIVE
        kinds = (
            Counter,
            UpDownCounter,
            Histogram,
            ObservableCounter,
            ObservableUpDownCounter,
            ObservableGauge,
        )
        super().__init__(preferred_temporality=dict.fromkeys(kinds, cumulative))
        import cramjam  # checked by setup(): the install hint is given before any work starts

        self._compress = cramjam.snappy.compress_raw
        self.url = url
        self._labels = tuple(label_attributes)
        self._translator = _Translator()
        self._last_ms = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Push ``metrics_data`` now.

        Raises:
            RemoteWriteError: Prometheus unreachable, or it refused the push.
        """
        series = self.series(metrics_data)
        if not series:
            return MetricExportResult.SUCCESS
        # Samples of a series must move forward in time: two exports within one millisecond
        # (a flush right before shutdown) would otherwise be refused as out of order.
        stamp = max(int(time.time() * 1000), self._last_ms + 1)
        self._last_ms = stamp
        timeout = max(0.1, min(_PUSH_TIMEOUT_S, timeout_millis / 1000))
        push(self.url, encode_write_request(series, stamp), timeout, self._compress)
        return MetricExportResult.SUCCESS

    def series(self, metrics_data: MetricsData) -> list[tuple[dict[str, str], float]]:
        """Return ``metrics_data`` as Prometheus series, ``(labels with __name__, value)``: named
        as the pull exporter names them, with the label attributes. Not thread-safe."""
        families = self._translator.families(with_labels(metrics_data, self._labels))
        return [
            ({**sample.labels, "__name__": sample.name}, float(sample.value))
            for family in families
            for sample in family.samples
        ]

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # every export is sent as it is made

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None
