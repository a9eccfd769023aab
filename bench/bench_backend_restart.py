"""Spans lost when Phoenix crashes mid-run: sent to it directly vs through the stack's rotel.

    python bench/bench_backend_restart.py [--steps 80] [--kill-after 3] [--gap 8] [--repeats 1]

Starts scripts/observability_stack.sh (Phoenix, Prometheus, rotel; the stack's venv must be
installed: ``bash scripts/observability_stack.sh install``, or point ``STACK_VENV`` at one) in a
scratch folder on free ports, then runs the same short GRPO job (``examples/run_grpo.py``,
exporter ``otlp,prometheus,file``) once per path, alternating:

- ``direct``: OTLP/HTTP straight to Phoenix (``http://127.0.0.1:<phoenix>``, ``http/protobuf``);
- ``rotel``: OTLP/gRPC to rotel, which forwards to Phoenix and retries while it is away.

``--kill-after`` seconds after the run's first spans reach its ``traces.jsonl``, Phoenix gets
SIGKILL (a crash: nothing flushed); ``--gap`` seconds later ``observability_stack.sh restart
phoenix`` starts it again on the same ports and data folder, and waits until it answers.
``down s`` is how long Phoenix was gone. After the run, the spans Phoenix holds for the run's
project are counted (Phoenix's own client) against the run's ``traces.jsonl`` (the truth: the file
exporter never talks to Phoenix). ``lost`` is the file's spans Phoenix lacks; ``run dropped`` is
what the run itself counted as dropped or failed (its ``telemetry cost`` line), which for the
direct path is the run knowing it lost them, and for rotel is 0 because rotel took them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanspec.traces.otlp_json import read_spans  # noqa: E402
from tests.backends import STACK_VENV, grpo_command, run_env, wait_for_phoenix  # noqa: E402
from tests.otlp_receiver import free_port  # noqa: E402

PATHS = ("direct", "rotel")
COST = re.compile(r"telemetry cost: .*? (\d+) spans \((\d+) exported, (\d+) dropped\)")


def stack(command: str, env: dict[str, str], *args: str) -> str:
    """Runs ``scripts/observability_stack.sh COMMAND ARGS``; returns its output. Raises on failure."""
    done = subprocess.run(
        ["bash", "scripts/observability_stack.sh", command, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    if done.returncode != 0:
        raise RuntimeError(f"observability_stack.sh {command} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def run_once(path: str, ports: dict[str, int], stack_env: dict, args, folder: Path) -> dict:
    """One GRPO run sent by ``path`` with a Phoenix crash and restart in the middle; returns its
    row of the table. Raises ``RuntimeError`` when the run fails or ends before the crash."""
    project = f"restart-{path}-{time.monotonic_ns()}"
    log_dir = folder / project
    if path == "direct":
        otlp = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['PHOENIX_PORT']}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
    else:
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}"}
    env = run_env(
        **otlp,
        NEMO_RL_OTEL_EXPORTER="otlp,prometheus,file",
        NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL=(
            f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}/api/v1/write"
        ),
    )
    traces = log_dir / "telemetry" / "traces.jsonl"
    start = time.monotonic()
    with open(folder / f"{project}.log", "w+") as log:
        proc = subprocess.Popen(
            grpo_command(log_dir, args.steps, project),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            while not (traces.exists() and traces.stat().st_size > 0):
                if proc.poll() is not None:
                    raise RuntimeError(f"{path} run ended before its first spans")
                time.sleep(0.2)
            time.sleep(args.kill_after)
            if proc.poll() is not None:
                raise RuntimeError(f"{path} run ended before the crash: use more --steps")
            pid = int((Path(stack_env["STACK_DIR"]) / "phoenix.pid").read_text())
            os.kill(pid, getattr(signal, f"SIG{args.signal}"))
            killed = time.monotonic()
            time.sleep(args.gap)
            stack("restart", stack_env, "phoenix")
            down_s = time.monotonic() - killed
            running_after = proc.poll() is None
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        log.seek(0)
        out = log.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{path} run failed:\n{out[-3000:]}")
    wall = time.monotonic() - start
    file_ids = {s.span_id for s in read_spans(traces)}
    got = wait_for_phoenix(ports["PHOENIX_PORT"], project, len(file_ids), timeout=90, settle=15)
    phoenix_ids = {s["span_id"] for s in got["spans"]}
    cost = COST.search(out)
    return {
        "path": path,
        "wall": wall,
        "down": down_s,
        "back_mid_run": running_after,
        "file": len(file_ids),
        "phoenix": len(phoenix_ids & file_ids),
        "lost": len(file_ids - phoenix_ids),
        "dropped": int(cost.group(3)) if cost else -1,
    }


def main(argv: list[str] | None = None) -> int:
    """Prints one row per run and the lost spans of each path; returns 0 (2 without the stack)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=80, help="GRPO steps a run (default 80)")
    parser.add_argument("--kill-after", type=float, default=3.0, help="seconds (default 3)")
    parser.add_argument("--gap", type=float, default=8.0, help="seconds down (default 8)")
    parser.add_argument("--signal", choices=("KILL", "TERM"), default="KILL")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    if not (STACK_VENV / "bin" / "phoenix").exists():
        print(
            f"bench_backend_restart: no Phoenix in the stack venv {STACK_VENV}: run "
            "'bash scripts/observability_stack.sh install' or set STACK_VENV",
            file=sys.stderr,
        )
        return 2
    names = ("PHOENIX_PORT", "PHOENIX_GRPC_PORT", "ROTEL_GRPC_PORT", "ROTEL_HTTP_PORT")
    ports = {name: free_port() for name in (*names, "PROMETHEUS_PORT")}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_restart_") as tmp:
        stack_env = run_env(
            **{k: str(v) for k, v in ports.items()},
            STACK_DIR=str(Path(tmp) / "stack"),
            STACK_VENV=str(STACK_VENV),
        )
        try:
            stack("up", stack_env)
            for i in range(args.repeats):
                # Alternate the order so a warmer machine favours neither path.
                for path in PATHS if i % 2 == 0 else reversed(PATHS):
                    row = run_once(path, ports, stack_env, args, Path(tmp))
                    rows.append(row)
                    print(
                        f"  run {i + 1}/{args.repeats} {path:6} lost {row['lost']:3d} of "
                        f"{row['file']} (Phoenix down {row['down']:.1f} s)",
                        flush=True,
                    )
        finally:
            stack("down", stack_env)

    print(
        f"\nPhoenix SIG{args.signal} {args.kill_after:g} s into the run's spans, restarted "
        f"{args.gap:g} s later; {args.steps} GRPO steps a run\n"
    )
    print(
        f"{'path':7} {'run s':>6} {'down s':>7} {'back mid-run':>12} {'spans in file':>14} "
        f"{'in Phoenix':>11} {'lost':>5} {'run dropped':>12}"
    )
    for r in rows:
        print(
            f"{r['path']:7} {r['wall']:6.1f} {r['down']:7.1f} {'yes' if r['back_mid_run'] else 'no':>12} "
            f"{r['file']:14d} {r['phoenix']:11d} {r['lost']:5d} {r['dropped']:12d}"
        )
    for path in PATHS:
        lost = [r["lost"] for r in rows if r["path"] == path]
        print(f"{path}: lost {min(lost)}-{max(lost)} spans over {len(lost)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
