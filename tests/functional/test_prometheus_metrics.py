"""The `prometheus` metrics exporter with a real Prometheus server (Debian's package), both ways:

- pull: a short GRPO run serves /metrics on 127.0.0.1 from each exporting process, Prometheus
  scrapes it, and the run's `rl.*` series come back through its HTTP API labelled with the run's
  id, role and rank;
- push (remote write): 12 processes started the project's own way (`init_telemetry_worker`)
  push at once, and Prometheus holds each one's series with its rank; a GRPO run with 2 policy
  and 2 generation ranks pushes one series per rank, labelled with the ranks its worker groups
  gave; with Prometheus down for a whole GRPO run, the run ends within its bound and counts every
  point it could not deliver as dropped.
"""

from __future__ import annotations

import re
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
            "--web.enable-remote-write-receiver",
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
            "telemetry.run_id=prom-test-run",
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


def test_pulled_series_carry_the_run_role_and_rank(scraped):
    api, _, _ = scraped
    found = prometheus_series(api, 'rl_policy_loss{rl_run_id="prom-test-run"}')
    assert len(found) == 1, found
    assert found[0]["metric"]["rl_worker_group"] == "driver"
    assert found[0]["metric"]["rl_worker_rank"] == "0"


WORKERS = 12
_WORKER = """
import sys
from nemo_rl.telemetry import init_telemetry_worker, record_metrics, shutdown_telemetry
rank = int(sys.argv[1])
init_telemetry_worker(rank, int(sys.argv[2]), "policy")
record_metrics({"loss": float(rank)}, "train")
print(shutdown_telemetry().cost().line())
"""


def test_twelve_processes_push_at_once_each_with_its_rank(scraped):
    """The project's own worker start-up in 12 processes on one node, all exporting: nothing
    finds them (they push), and Prometheus holds one loss series per rank with that rank's last
    value, whatever ports are free."""
    api, _, _ = scraped
    env = run_env(
        NEMO_RL_OTEL_RUN_ID="twelve",
        NEMO_RL_OTEL_EXPORTER="prometheus",
        NEMO_RL_OTEL_EXPORT_STRATEGY="all_ranks",
        NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL=f"http://127.0.0.1:{api}/api/v1/write",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(rank), str(WORKERS)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORKERS)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
        assert "metric points (0 dropped)" in out, out
    found = prometheus_series(api, 'rl_policy_loss{rl_run_id="twelve"}')
    ranks = {r["metric"]["rl_worker_rank"]: float(r["values"][-1][1]) for r in found}
    assert ranks == {str(rank): float(rank) for rank in range(WORKERS)}
    assert {r["metric"]["rl_worker_group"] for r in found} == {"policy"}


def test_prometheus_down_for_the_whole_run_ends_in_time_and_counts_the_points(tmp_path):
    """Pushing to a port where nothing listens: the 1-step run ends normally, within its shutdown
    bound, and its own cost line counts as dropped every point the push could not deliver."""
    closed = free_port()
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={tmp_path / 'run'}",
            "logger.tqdm=false",
            "grpo.max_steps=1",
            "grpo.num_prompts_per_step=4",
            "grpo.val_period=0",
            "checkpointing.enabled=false",
            "telemetry.exporter=prometheus",
            f"telemetry.prometheus_remote_write_url=http://127.0.0.1:{closed}/api/v1/write",
            "telemetry.shutdown_timeout_s=3",
        ],
        cwd=ROOT,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("telemetry cost:"))
    points, dropped = map(int, re.search(r"(\d+) metric points \((\d+) dropped\)", line).groups())
    assert points > 0 and dropped == points, line
    assert f"remote write http://127.0.0.1:{closed}/api/v1/write failed" in out, out[-3000:]
    assert elapsed < 300, elapsed  # never hung on the dead endpoint (each push fails at once)


def test_a_data_parallel_run_pushes_one_series_per_rank(scraped, tmp_path):
    """A GRPO run with 2 policy and 2 generation ranks (the project's worker groups, real Ray),
    every rank exporting and pushing: each rank's series carry the rank the worker group gave it,
    so the generation ranks' token counts are two series of one run, never one."""
    api, _, _ = scraped
    run_id = "dp-push"
    proc = subprocess.run(
        [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={tmp_path / 'run'}",
            "logger.tqdm=false",
            "grpo.max_steps=2",
            "grpo.num_prompts_per_step=4",
            "grpo.val_period=0",
            "checkpointing.enabled=false",
            "policy.num_workers=2",
            "generation.num_workers=2",
            "cluster.num_cpus=4",
            "cluster.worker_num_cpus=1",
            "telemetry.exporter=prometheus",
            "telemetry.export_strategy=all_ranks",
            f"telemetry.prometheus_remote_write_url=http://127.0.0.1:{api}/api/v1/write",
            f"telemetry.run_id={run_id}",
        ],
        cwd=ROOT,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "metric points (0 dropped)" in proc.stdout, proc.stdout[-3000:]
    selector = f'{{rl_run_id="{run_id}"}}'
    usage = prometheus_series(api, "gen_ai_client_token_usage_count" + selector)
    ranks = {(r["metric"]["rl_worker_group"], r["metric"]["rl_worker_rank"]) for r in usage}
    assert ranks == {("generation", "0"), ("generation", "1")}, ranks
    info = prometheus_series(api, "target_info" + selector)
    processes = {(r["metric"]["rl_worker_group"], r["metric"]["rl_worker_rank"]) for r in info}
    assert {("driver", "0"), ("generation", "0"), ("generation", "1")} <= processes, processes
