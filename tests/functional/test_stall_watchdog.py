"""A silent stall, as a user meets it: examples/run_grpo.py in a subprocess, its policy worker
stopped with SIGSTOP mid-run. The driver's watchdog must name the phase and the worker call it
waits for within the phase's bound; once the worker is resumed the run completes, and its
telemetry cost line agrees with the trace file."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 8  # above a normal phase here (policy_update takes ~4 s on a loaded 2-core box)
# The driver phases that wait on the policy worker, bounded to BOUND_S for this test.
BOUNDED = ["logprob", "reference_policy", "policy_update", "weight_sync"]


def test_registry(tmp_path: Path) -> Path:
    """The shipped registry with the policy-worker phases bounded to BOUND_S seconds."""
    text = (ROOT / "schemas" / "span_groups.yaml").read_text()
    for phase in BOUNDED:
        head = f"  - name: rl.{{algorithm}}.{phase}\n"
        start = text.index(head)
        group = text.index("    group:", start)
        end = text.index("\n", group) + 1
        rest = text[end:]
        if rest.startswith("    max_duration:"):
            rest = rest[rest.index("\n") + 1 :]
        text = text[:end] + f"    max_duration: {BOUND_S}s\n" + rest
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    return path


test_registry.__test__ = False  # a helper, not a test


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process below ``root``."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
    out = {}
    for pid in parents:
        p = pid
        while p in parents and p > 1:
            p = parents[p]
            if p == root:
                out[pid] = commands[pid].decode(errors="replace")
                break
    return out


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _span_count(path: Path) -> int:
    return sum(
        len(ss["spans"])
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
    )


def test_a_stopped_policy_worker_is_named_by_the_driver_and_the_run_completes(tmp_path):
    log_dir = tmp_path / "run"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }
    env["SPANSPEC_REGISTRY"] = str(test_registry(tmp_path))
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [
        sys.executable,
        "examples/run_grpo.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        "grpo.max_steps=3",
        "grpo.num_prompts_per_step=8",
        "grpo.val_period=0",
        "checkpointing.enabled=false",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda s=s, b=b: b.extend(iter(s.readline, "")), daemon=True)
        for s, b in ((proc.stdout, out), (proc.stderr, err))
    ]
    for reader in readers:
        reader.start()
    stopped = None
    try:
        # Once the first step is logged the loop is running: stop the policy worker.
        _wait_for(
            lambda: (
                (log_dir / "metrics.jsonl").exists()
                and (log_dir / "metrics.jsonl").read_text().strip()
            ),
            180,
            "the first logged step",
        )
        workers = _descendants(proc.pid)
        (policy_pid,) = [pid for pid, cmd in workers.items() if "ray::PolicyWorker" in cmd]
        before = len("".join(err))
        os.kill(policy_pid, signal.SIGSTOP)
        stopped, at = policy_pid, time.monotonic()
        _wait_for(lambda: "stall: span" in "".join(err)[before:], 60, "the stall warning")
        waited = time.monotonic() - at
        time.sleep(0.5)  # the rest of the warning's lines
        os.kill(policy_pid, signal.SIGCONT)
        stopped = None
        assert proc.wait(timeout=240) == 0, "".join(out)[-3000:] + "".join(err)[-5000:]
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for reader in readers:
        reader.join(timeout=5)
    text = "".join(err)[before:]
    warning = text[text.index("stall: span") :]
    end = warning.find("\nstall: span")  # a later warning (another phase) starts there
    warning = warning if end < 0 else warning[:end]
    print(warning)  # shown with -s: what a user sees
    first = warning.splitlines()[0]
    phase = re.search(r"span 'rl\.grpo\.([a-z_]+)' has been open", first)
    assert phase and phase.group(1) in BOUNDED, first
    assert f"longer than its max_duration {BOUND_S}s" in first and "group driver" in first
    assert re.search(
        rf"waiting for: PolicyWorker\.[a-z_]+ \(actor [0-9a-f]{{8}}, pid {policy_pid}\), called",
        warning,
    ), warning
    assert "<- stalled" in warning and "rl.grpo.step" in warning
    # Reported within the bound (plus the time the phase was already open and one poll).
    assert waited < 2 * BOUND_S + 5, waited

    stdout = "".join(out)
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("telemetry cost:")]
    print(line)
    spans, exported, dropped = map(
        int, re.search(r"(\d+) spans \((\d+) exported, (\d+) dropped\)", line).groups()
    )
    assert spans == exported == _span_count(log_dir / "telemetry" / "traces.jsonl") > 0
    assert dropped == 0
    assert re.search(r"export CPU \d+\.\d+ s = \d+\.\d+% of the run's \d+\.\d s CPU", line)
