"""Per-rank insight, for real: a GRPO run with two policy ranks, one of them slowed from outside
(SIGSTOP/SIGCONT in a duty cycle on its process), names that rank, and only it, as the straggler:
in a warning while the run goes, in the end-of-run section and in ``spanspec report``. The same
run's worker spans carry their memory peaks, and its metrics file the model FLOPs of every step.

No GPU here: the CUDA memory attributes are absent and MFU is unknown (said, not invented)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.traces import ROOT, clean_env, read_spans, spanspec_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 6
THRESHOLD = 0.2
ARGS = (
    "policy.num_workers=2",
    "generation.num_workers=1",
    "cluster.num_cpus=3",
    "cluster.worker_num_cpus=1",
    "logger.tqdm=false",
    f"grpo.max_steps={STEPS}",
    "grpo.num_prompts_per_step=8",
    "grpo.num_generations_per_prompt=4",
    # scoring in chunks of 4 rows, training on a rank's whole share (16 rows) at once: the
    # training micro-batch must need more memory than any scoring chunk
    "policy.logprob_batch_size=4",
    "grpo.val_at_start=false",
    "grpo.val_period=1000",
    "checkpointing.enabled=false",
    "telemetry.exporter=file",
    "telemetry.span_groups=per_step",
    "telemetry.export_strategy=all_ranks",
    # above the noise of a shared 2-core machine; the stopped rank is ~1.4x the median
    f"telemetry.straggler_threshold={THRESHOLD}",
)
WORKER_SPANS = (
    "rl.worker.train_microbatch",
    "rl.worker.allreduce",
    "rl.worker.optimizer_step",
    "rl.worker.logprob",
    "rl.worker.generate",
)


def _policy_pids(ray_tmp: str) -> list[int]:
    """The ``ray::PolicyWorker`` processes of this run's Ray session."""
    out = subprocess.run(["pgrep", "-f", "ray::PolicyWorker"], capture_output=True, text=True)
    pids = []
    for pid in map(int, out.stdout.split()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if ray_tmp.encode() in environ:
            pids.append(pid)
    return sorted(pids)


class DutyCycle(threading.Thread):
    """Stops ``pid`` for ``stop_s`` out of every ``stop_s + run_s`` until :meth:`end`."""

    def __init__(self, pid: int, stop_s: float = 0.04, run_s: float = 0.04) -> None:
        super().__init__(daemon=True)
        self.pid, self.stop_s, self.run_s = pid, stop_s, run_s
        self._done = threading.Event()

    def run(self) -> None:
        try:
            while not self._done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.stop_s)
                os.kill(self.pid, signal.SIGCONT)
                self._done.wait(self.run_s)
        except ProcessLookupError:
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def end(self) -> None:
        self._done.set()
        self.join(timeout=5)


@pytest.fixture(scope="module")
def slowed(tmp_path_factory):
    """The run, its output lines in arrival order, the slowed pid and its spans."""
    tmp = tmp_path_factory.mktemp("ranks")
    log_dir = tmp / "run"
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths
    env = {**clean_env(), "RAY_TMPDIR": ray_tmp}
    proc = subprocess.Popen(
        [sys.executable, "examples/run_grpo.py", *ARGS, f"logger.log_dir={log_dir}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    cycle = None
    try:
        deadline = time.monotonic() + 240
        while len(pids := _policy_pids(ray_tmp)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.2)
        slow_pid = pids[-1]
        cycle = DutyCycle(slow_pid)
        cycle.start()
        proc.wait(timeout=400)
    finally:
        if cycle is not None:
            cycle.end()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = "".join(lines)
    (tmp / "stdout.txt").write_text(out)  # what the run printed, for a failure's reader
    assert proc.returncode == 0, out[-5000:]
    spans = read_spans(log_dir / "telemetry" / "traces.jsonl")
    rank = {
        s["resource"]["process.pid"]: s["resource"]["rl.worker.rank"]
        for s in spans
        if s["resource"].get("rl.worker.group") == "policy"
    }[slow_pid]
    return log_dir, out.splitlines(), slow_pid, rank, spans


def test_the_slowed_rank_and_only_it_is_named_during_and_after_the_run(slowed):
    log_dir, lines, pid, rank, _ = slowed
    other = 1 - rank
    end = next(i for i, line in enumerate(lines) if line.startswith("where the step time went"))
    during = [line for line in lines[:end] if line.startswith("straggler:")]
    assert during, "\n".join(lines)
    first = during[0]  # group, rank, node, pid, phase, the step, how much slower, over what
    found = re.match(
        rf"straggler: policy rank {rank} \(node \w+, pid {pid}\) is \d+% slower than the median "
        r"in (rl\.worker\.\w+) at step (\d+), the slowest in \d+ of the last (\d+) steps "
        rf"\(telemetry\.straggler_threshold {THRESHOLD}\)",
        first,
    )
    assert found, first
    phase, step, calls = found.group(1), int(found.group(2)), int(found.group(3))
    assert 1 <= step <= STEPS, first  # numbered as the console and rl.iteration: from 1
    if phase == "rl.worker.train_microbatch":  # one call a step, from step 1: fired at the last
        assert step == calls, first
    assert not any(f"rank {other} " in line for line in during)
    after = [line.strip() for line in lines[end:] if line.strip().startswith("straggler:")]
    assert after and all(f"policy rank {rank} (node " in line for line in after), after
    assert not any(f"rank {other} " in line for line in after)
    assert any(line.strip().startswith("time lost to the slowest rank:") for line in lines[end:])
    assert any("MFU unknown" in line for line in lines[end:])

    html = log_dir / "report.html"
    proc = spanspec_cli(
        "report", str(log_dir), "-o", str(html), "--straggler-threshold", str(THRESHOLD)
    )
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("straggler:")]
    assert all(
        f"policy {rank} " in line
        for line in proc.stdout.splitlines()
        if line.startswith("straggler:")
    )
    page = html.read_text()
    assert page.count(">straggler<") == 1
    assert re.search(rf"<th>policy {rank} <b class=\"straggler\">straggler</b></th>", page)
    assert re.search(r'"cpu_per_wall": ?[0-9.]+', page)  # the breakdown table's cpu/wall column


def test_every_worker_span_holds_its_memory_peak(slowed):
    _, _, _, _, spans = slowed
    rises: dict[str, int] = {}
    for s in spans:
        if s["name"] in WORKER_SPANS:
            value = s["attrs"].get("rl.memory.rss_peak_bytes")
            assert isinstance(value, int) and value > 0, s
            assert s["attrs"]["rl.memory.rss_rise_bytes"] >= 0
            assert "rl.memory.cuda_peak_allocated_bytes" not in s["attrs"]  # no GPU here
            rises[s["name"]] = max(rises.get(s["name"], 0), s["attrs"]["rl.memory.rss_rise_bytes"])
    assert set(rises) == set(WORKER_SPANS)
    # a training micro-batch keeps activations for its backward pass: it needs more than a
    # forward under no_grad (the absolute mark of a later span also holds what the allocator kept)
    assert rises["rl.worker.train_microbatch"] > rises["rl.worker.logprob"], rises


def test_model_flops_of_every_training_step_are_in_the_metrics(slowed):
    log_dir, _, _, _, spans = slowed
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert len(train) == STEPS
    for r in train:
        assert r["train/flops"] > 0 and r["train/flops_per_sec"] > 0
        assert "train/mfu" not in r  # CPU, no configured peak: unknown
        assert r["train/rank_wait_s"] >= 0
    micro = [s for s in spans if s["name"] == "rl.worker.train_microbatch"]
    assert all(s["attrs"]["rl.flops"] > 0 and s["attrs"]["rl.tokens_per_second"] > 0 for s in micro)


def test_every_worker_span_holds_its_cpu_time_and_the_breakdown_shows_cpu_over_wall(slowed):
    _, lines, _, rank, spans = slowed
    for s in spans:
        if s["name"] in WORKER_SPANS:
            cpu = s["attrs"].get("rl.cpu.seconds")
            assert isinstance(cpu, float) and cpu >= 0, s
    end = next(i for i, line in enumerate(lines) if line.startswith("where the step time went"))
    assert lines[end + 1].split()[5] == "cpu/wall", lines[end + 1]
    # the breakdown's row (the ranks section below it has rows of that name too)
    row = next(
        r for line in lines[end:] if (r := line.split())[:1] == ["rl.worker.train_microbatch"]
    )
    assert 0 < float(row[4]) < 16, row  # CPU over wall of the two ranks' micro-batches
    # per rank: the rank stopped half the time got a core for less of its wall time
    at = next(i for i, line in enumerate(lines) if line.startswith("cpu/wall per phase and lane"))
    words = lines[at + 1].split()[1:]  # lanes of two words each: "generation 0", "policy 1"
    lanes = [" ".join(words[i : i + 2]) for i in range(0, len(words), 2)]
    cells = next(line.split() for line in lines[at + 2 :] if "rl.worker.train_microbatch" in line)
    ratio = {lane: float(v) for lane, v in zip(lanes, cells[1:], strict=True) if v != "-"}
    assert ratio[f"policy {rank}"] < ratio[f"policy {1 - rank}"], ratio
