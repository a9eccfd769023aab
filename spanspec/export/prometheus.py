"""The ``prometheus`` exporter: this process's metrics at ``http://127.0.0.1:<port>/metrics``.

Built from the well-kept ``opentelemetry-exporter-prometheus`` (a pull reader) and
``prometheus_client``'s HTTP server, on 127.0.0.1 only. Several processes of a job on one node
share the base port: each takes the first free one of :data:`PORTS_TRIED` ports from it (the
driver starts first, so it gets the base), and the address is in the handle's destinations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from spanspec.settings import SettingsError

__all__ = ["PORTS_TRIED", "PrometheusServer", "start"]

PORTS_TRIED = 16
_log = logging.getLogger("spanspec.export")


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


def start(
    base_port: int, tries: int = PORTS_TRIED, setting: str = "prometheus_port"
) -> PrometheusServer:
    """Serve a fresh registry's metrics on the first free port from ``base_port``.

    ``setting`` is how the message tells a person to change the port (the variable and key).

    Returns:
        The running :class:`PrometheusServer`.

    Raises:
        SettingsError: naming ``setting`` when none of the ports is free.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    from spanspec import runtime
    from spanspec.export._guards import redact_metrics

    class RedactingReader(PrometheusMetricReader):
        """Serves ``target_info`` with sensitive resource values redacted, as every exporter."""

        def _receive_metrics(self, metrics_data: Any, *args: Any, **kwargs: Any) -> None:
            if metrics_data is not None:
                metrics_data = redact_metrics(metrics_data, runtime.sensitive_keys())
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
