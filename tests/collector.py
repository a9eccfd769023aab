"""A real OpenTelemetry collector for tests and benchmarks: rotel's agent, on 127.0.0.1.

    with OtlpReceiver() as rx, rotel_agent(rx.grpc_endpoint, "grpc", tmp_path) as agent:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = agent.grpc_endpoint   # or agent.http_endpoint
        ...                                                                 # export something
        spans = rx.wait_for_spans(3)                                        # forwarded by rotel

rotel (the pip package ``rotel``) ships the agent binary; :data:`AGENT` is None where it ships
none for this platform.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.otlp_receiver import free_port

__all__ = ["AGENT", "Agent", "rotel_agent", "wait_listening"]


def _agent_binary() -> Path | None:
    try:
        import rotel
    except ImportError:
        return None
    path = Path(rotel.__file__).parent / "rotel-agent"
    return path if path.exists() else None


AGENT = _agent_binary()


def wait_listening(port: int, timeout: float = 10.0) -> None:
    """Return once 127.0.0.1:``port`` accepts connections; raises ``OSError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@dataclass
class Agent:
    """A running rotel agent: its OTLP endpoints (``http://127.0.0.1:<port>``) and its process."""

    grpc_endpoint: str
    http_endpoint: str
    process: subprocess.Popen[bytes]


@contextmanager
def rotel_agent(
    upstream: str, protocol: str, work_dir: Path, batch_timeout: str = "50ms"
) -> Iterator[Agent]:
    """Run rotel with OTLP in (gRPC and HTTP) and its OTLP exporter to ``upstream``; yield it.

    ``protocol`` is rotel's exporter protocol, ``grpc`` or ``http``; its pid and log files go to
    ``work_dir``. Waits until both receivers listen; stops the agent on exit. Raises
    ``RuntimeError`` when rotel ships no agent for this platform.
    """
    if AGENT is None:
        raise RuntimeError("rotel ships no agent binary for this platform (pip install rotel)")
    grpc_port, http_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            str(AGENT),
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{grpc_port}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{http_port}",
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            upstream,
            "--otlp-exporter-protocol",
            protocol,
            "--batch-timeout",
            batch_timeout,
            "--pid-file",
            str(work_dir / "rotel.pid"),
            "--log-file",
            str(work_dir / "rotel.log"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(grpc_port)
        wait_listening(http_port)
        yield Agent(f"http://127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}", process)
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
