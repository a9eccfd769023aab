"""The `prometheus` metrics exporter scraped by a real Prometheus server (Debian's package): a short
GRPO run serves /metrics on 127.0.0.1 from each exporting process, Prometheus scrapes it, and the
run's `rl.*` metrics come back through Prometheus's HTTP API with the run's labels."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.backends import prometheus_series, run_env
from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (scripts/test.sh)"),
]
PORTS = 4  # the driver and the two workers take the first free ports from the base


def _free_block(size: int) -> int:
    """A base port with ``size`` free ports after it (checked, not reserved)."""
    import socket

    for _ in range(50):
        base = free_port()
        try:
            socks = []
            for p in range(base, base + size):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports")


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prom")
    base, api = _free_block(PORTS), free_port()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in range(base, base + PORTS))
    (folder / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        f"scrape_configs:\n  - job_name: nemo-rl\n    static_configs:\n      - targets: [{targets}]\n"
    )
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{api}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(folder / "prometheus.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{api}/-/ready", timeout=1)
                break
            except OSError:
                assert server.poll() is None, (folder / "prometheus.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "prometheus not ready"
                time.sleep(0.3)
        env = run_env()
        cmd = [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={folder / 'run'}",
            "logger.tqdm=false",
            "grpo.max_steps=4",
            "grpo.num_prompts_per_step=4",
            "grpo.val_period=2",
            "checkpointing.enabled=false",
            "telemetry.exporter=file,prometheus",
            f"telemetry.prometheus_port={base}",
            "telemetry.project=prom-test",
        ]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        yield api, base, proc
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_run_says_where_metrics_are_served(scraped):
    _, base, proc = scraped
    out = proc.stdout.splitlines()
    line = next(x for x in out if x.startswith("telemetry: traces -> "))
    assert "metrics -> file " in line and f", prometheus http://127.0.0.1:{base}/metrics;" in line


def test_rl_series_come_back_through_the_prometheus_api(scraped):
    api, base, _ = scraped
    found = prometheus_series(api, '{__name__=~"rl_.*"}')
    names = {r["metric"]["__name__"] for r in found}
    assert {"rl_policy_loss", "rl_reward_mean"} <= {n.removesuffix("_ratio") for n in names}, names
    loss = next(r for r in found if r["metric"]["__name__"].startswith("rl_policy_loss"))
    assert loss["metric"]["instance"] == f"127.0.0.1:{base}"  # the driver took the first port
    values = [float(v) for _, v in loss["values"]]
    assert values and all(v == v for v in values)  # numbers, not NaN
    # The resource reaches Prometheus as target_info labels: which run and project.
    info = prometheus_series(api, "target_info")
    assert any(r["metric"].get("openinference_project_name") == "prom-test" for r in info), info
