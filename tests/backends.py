"""What the backend tests share: a run's environment free of outside telemetry settings, and the
series a Prometheus server scraped, through its HTTP API."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request

__all__ = ["prometheus_series", "run_env"]


def run_env(**extra: str) -> dict[str, str]:
    """This process's environment without telemetry or Ray settings from outside, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }
    return {**env, **extra}


def prometheus_series(port: int, selector: str, window: str = "15m") -> list[dict]:
    """Every series ``selector`` matches on the Prometheus server on ``127.0.0.1:port`` over the
    last ``window``, each ``{"metric": labels, "values": [[time, "value"], ...]}``.

    A range, not an instant query: once a run ends its targets go down and Prometheus marks their
    series stale, so an instant query finds nothing, while the scraped samples are all kept.
    """
    query = f"{selector}[{window}]"
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]
