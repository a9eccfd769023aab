"""A training run that is stopped from outside: SIGTERM to the driver (with a collector that never
answers), SIGTERM to a worker, kill -9 of a worker. Each ends with one line on stderr, the exit
code that says what happened, the trace file complete, and no Ray process of the run left.

A run's processes (raylet, GCS, Ray's agents, workers) are told from any other on the machine by
the marker the run puts in their environment (``NEMO_RL_RUN_MARKER``, read from
``/proc/PID/environ``), never by name: the test reads it from a process the driver started.
A process below a marked one is the run's too (an agent's title can blank its copy).
Each run also gets its own short ``RAY_TMPDIR`` (Ray's socket paths).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.otlp_receiver import BlackHole

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Small steps, no validation or checkpoints: the run reaches its first step quickly.
QUICK = [
    # Every test stops its run; one that could end first (a step takes 0.2 s here) is a flake.
    "grpo.max_steps=100000",
    "grpo.num_prompts_per_step=8",
    "grpo.num_generations_per_prompt=4",
    "grpo.val_at_start=false",
    "grpo.val_period=1000",
    "checkpointing.enabled=false",
]
SHUTDOWN_S = 3.0


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# An agent takes its ray:: title only once its imports are done (a minute on a busy machine);
# until then its command line names its script.
_AGENT_SCRIPTS = {
    "ray/dashboard/agent.py": "ray::DashboardAgent",
    "ray/_private/runtime_env/agent/main.py": "ray::RuntimeEnvAgent",
}


def _role(pid: int) -> str:
    """What a Ray process is: its title (``ray::PolicyWorker``), or the agent its script is."""
    cmdline = _cmdline(pid)
    for script, title in _AGENT_SCRIPTS.items():
        if script in cmdline:
            return title
    return cmdline.split(" ", 1)[0].split(".")[0]  # "ray::PolicyWorker.train" while in a call


def _marker(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"NEMO_RL_RUN_MARKER=")]
    return found[0] if found else None


def _marked(marker: str) -> list[int]:
    """The live processes whose environment holds ``marker``, and those below them: an agent's
    title may blank its copy (zombies are gone in all but name)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if stat[0] != "Z":
                parents[int(entry)] = int(stat[1])
    markers = {pid: m for pid in parents if (m := _marker(pid))}
    out = []
    for pid in parents:
        up = pid  # up to the nearest marked process (a run's child run has a marker of its own)
        while up in parents and up not in markers and up > 1:
            up = parents[up]
        if markers.get(up) == marker:
            out.append(pid)
    return sorted(out)


class Run:
    """``examples/run_grpo.py`` in a subprocess, with its own Ray folder."""

    def __init__(self, tmp: Path, *overrides: str, env: dict[str, str] | None = None) -> None:
        self.log_dir = tmp / "run"
        self.ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: socket paths
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("NEMO_RL_OTEL_", "OTEL_")) and k != "NEMO_RL_RUN_MARKER"
        }
        full_env.update(env or {}, RAY_TMPDIR=self.ray_tmp)
        self.stderr_path = tmp / "stderr"
        self.proc = subprocess.Popen(
            [sys.executable, "examples/run_grpo.py", *QUICK, *overrides],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=self.stderr_path.open("w"),
            text=True,
        )
        self._marker: str | None = None

    @property
    def marker(self) -> str:
        """The marker the run put in its processes' environment (read from one the driver started)."""
        if self._marker is None:
            found = {_marker(p) for p in _children(self.proc.pid)} - {None}
            assert len(found) == 1, f"the driver's children carry markers {found}"
            self._marker = found.pop()
        return self._marker

    def processes(self) -> list[int]:
        return _marked(self.marker)

    def wait_for_step(self, timeout: float = 240) -> None:
        metrics = self.log_dir / "metrics.jsonl"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if metrics.exists() and metrics.read_text().strip():
                self.marker  # noqa: B018 (read while the driver, and so its children, are up)
                return
            assert self.proc.poll() is None, self.stderr_path.read_text()
            time.sleep(0.5)
        raise AssertionError("no step finished in time")

    def wait_until_stuck(self, quiet_s: float = 2.0, timeout: float = 60) -> None:
        """Until no step has been logged for ``quiet_s``: the driver waits in a step (every
        step calls the policy worker, which the caller stopped)."""
        metrics = self.log_dir / "metrics.jsonl"
        size, since = -1, time.monotonic()
        deadline = since + timeout
        while time.monotonic() < deadline:
            now = metrics.stat().st_size
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.2)
        raise AssertionError(f"steps still logged {timeout:.0f} s after the worker was stopped")

    def worker(self, class_name: str) -> int:
        for pid in self.processes():
            if _cmdline(pid).startswith(f"ray::{class_name}"):
                return pid
        raise AssertionError(f"no {class_name} process")

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        self.stdout, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, self.stderr_path.read_text()

    def close(self) -> None:
        if self._marker is None and self.proc.poll() is None:
            with contextlib.suppress(AssertionError):
                self.marker  # noqa: B018 (read while the driver's children are its own)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in (
            _marked(self._marker) if self._marker else []
        ):  # never leave a cluster behind a failed test
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for r in started:
        r.close()


def _spans(path: Path) -> list[dict]:
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"] = {
                        a["key"]: next(iter(a["value"].values())) for a in s.get("attributes", [])
                    }
                    spans.append(s)
    return spans


def _assert_steps_done_reported(run: Run) -> None:
    """A stopped run still says where the time of the steps that finished went."""
    out = run.stdout
    assert "where the step time went" in out and "rl.grpo.policy_update" in out, out[-3000:]
    assert "telemetry cost:" in out and "(the driver's; the workers were stopped)" in out, out
    assert f"report: spanspec report {run.log_dir} -o {run.log_dir / 'report.html'}" in out, out


def _assert_no_ray_left(run: Run) -> None:
    deadline = time.monotonic() + 10
    while run.processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = {p: _cmdline(p) for p in run.processes()}
    assert not left, f"Ray processes left behind: {left}"


def test_sigterm_to_the_driver_with_a_black_hole_collector(tmp_path, runs):
    with BlackHole() as hole:
        run = Run(
            tmp_path,
            f"logger.log_dir={tmp_path}/run",
            "telemetry.exporter=otlp,file",
            "telemetry.span_groups=all",
            f"telemetry.shutdown_timeout_s={SHUTDOWN_S}",
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": hole.endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT": "2"},
        )
        runs.append(run)
        run.wait_for_step()
        # A stopped policy worker too: its close() never answers, and the exit must not wait
        # for it (nor for the collector) longer than the bounds.
        stopped = run.worker("PolicyWorker")
        os.kill(stopped, signal.SIGSTOP)
        try:
            run.wait_until_stuck()  # inside the step that waits for the stopped worker
            run.proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            code, stderr = run.finish()
            elapsed = time.monotonic() - sent
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except OSError:
                pass
    print(f"exit {elapsed:.1f} s after SIGTERM")
    assert code == 143, stderr
    assert "error: terminated by SIGTERM" in stderr
    _assert_steps_done_reported(run)
    assert "Traceback" not in stderr and "ended span" not in stderr, stderr
    # The driver's flush is bounded by SHUTDOWN_S, and so are the workers' (a stopped one is
    # killed, not waited for); then Ray stops. About 6 s here; 20 s on a loaded box.
    assert elapsed < 20, elapsed
    spans = _spans(tmp_path / "run" / "telemetry" / "traces.jsonl")
    (job,) = [s for s in spans if s["name"] == "rl.grpo.job"]
    assert job["attrs"].get("spanspec.truncated") is True
    steps = [s for s in spans if s["name"] == "rl.grpo.step"]
    assert any(s["attrs"].get("spanspec.truncated") for s in steps)  # the step it stopped in
    assert all(s["traceId"] == job["traceId"] for s in steps)
    _assert_no_ray_left(run)


@pytest.mark.parametrize(
    ("how", "code", "words"),
    [
        (signal.SIGKILL, 1, ["policy rank 0 (node ", "died during "]),
        (signal.SIGTERM, 143, ["policy rank 0 (node ", "terminated by SIGTERM"]),
    ],
)
def test_a_worker_stopped_from_outside_is_one_line_naming_it(tmp_path, runs, how, code, words):
    run = Run(tmp_path, f"logger.log_dir={tmp_path}/run")
    runs.append(run)
    run.wait_for_step()
    pid = run.worker("PolicyWorker")
    os.kill(pid, how)
    status, stderr = run.finish()
    assert status == code, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    for w in words:
        assert w in errors[0]
    assert str(pid) in errors[0]
    # what the driver exported is complete: every line parses
    _spans(tmp_path / "run" / "telemetry" / "traces.jsonl")
    _assert_no_ray_left(run)


@pytest.mark.parametrize(
    ("how", "code", "words"),
    [
        (signal.SIGHUP, 129, "error: terminated by SIGHUP"),
        (signal.SIGINT, 130, "error: interrupted by SIGINT (Ctrl-C)"),
    ],
    ids=["SIGHUP", "SIGINT"],
)
def test_sighup_and_sigint_to_the_driver_end_the_run_like_sigterm(tmp_path, runs, how, code, words):
    run = Run(tmp_path, f"logger.log_dir={tmp_path}/run", "telemetry.span_groups=all")
    runs.append(run)
    run.wait_for_step()
    run.proc.send_signal(how)
    status, stderr = run.finish()
    assert status == code, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(words), stderr
    _assert_steps_done_reported(run)
    spans = _spans(tmp_path / "run" / "telemetry" / "traces.jsonl")
    (job,) = [s for s in spans if s["name"] == "rl.grpo.job"]
    assert job["attrs"].get("spanspec.truncated") is True  # flushed and marked, not lost
    _assert_no_ray_left(run)


def test_kill_9_of_the_driver_leaves_no_ray_process_for_long(tmp_path, runs):
    run = Run(tmp_path, f"logger.log_dir={tmp_path}/run")
    runs.append(run)
    run.wait_for_step()
    # Ray's agents and the run's workers carry the marker, not only what the driver started.
    wanted = {"ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::PolicyWorker"}
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while not wanted <= seen and time.monotonic() < deadline:
        seen |= {_role(p) for p in run.processes()}
        time.sleep(0.5)
    assert wanted <= seen, seen
    run.proc.kill()
    run.proc.wait()
    deadline = time.monotonic() + 30
    while run.processes() and time.monotonic() < deadline:
        time.sleep(1)
    left = {p: _cmdline(p) for p in run.processes()}
    assert not left, f"Ray processes left 30 s after kill -9 of the driver: {left}"
