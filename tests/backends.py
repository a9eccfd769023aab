"""What the backend tests share: a run's environment free of outside telemetry settings, and a
query against a Prometheus server's HTTP API."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request

__all__ = ["prometheus_query", "run_env"]


def run_env(**extra: str) -> dict[str, str]:
    """This process's environment without telemetry or Ray settings from outside, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }
    return {**env, **extra}


def prometheus_query(port: int, promql: str) -> list[dict]:
    """The result vector of an instant query to the Prometheus server on ``127.0.0.1:port``."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]
