"""How fast the trace readers read, and how much memory they hold, on runs of 100 MB and 1 GB.

    python bench/bench_readers.py                       # makes a small real run first (~1 min)
    python bench/bench_readers.py --source RUN/telemetry/traces.jsonl --sizes 100,1000
    python bench/bench_readers.py --before 4dea668      # also the readers of that commit

A synthetic run is copies of a real run's ``traces.jsonl`` one after another: each copy under
fresh trace and span ids, its times shifted past the previous copy's, so the copies read as one
long run of many steps. Each command (``view``, ``live-check``, ``report``, ``diff`` of the run
against itself, and the end-of-run breakdown, ``step_breakdown``) runs in its own process; the
table gives its wall time, MB/s of trace file and peak RSS (``wait4``'s ``ru_maxrss``). With
``--before REV`` the same commands run on that commit's ``spanspec`` (``git archive``) beside
them, where the command exists there. Target: every command reads the 1 GB run within 256 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ID = re.compile(r'"(traceId|spanId|parentSpanId)":"([0-9a-f]+)"')
_TIME = re.compile(r'"(startTimeUnixNano|endTimeUnixNano|timeUnixNano)":"(\d+)"')


def make_run(source: Path, target: Path, megabytes: int) -> int:
    """Write ``target`` (a ``telemetry/traces.jsonl`` folder tree) of about ``megabytes`` MB from
    copies of ``source``; returns its size in bytes."""
    text = source.read_text()
    times = [int(m.group(2)) for m in _TIME.finditer(text)]
    period = max(times) - min(times) + 1_000_000_000
    folder = target / "telemetry"
    folder.mkdir(parents=True, exist_ok=True)
    out_path = folder / "traces.jsonl"
    want = megabytes * 1_000_000
    written = 0
    with out_path.open("w") as out:
        copy = 0
        while written < want:
            shift = copy * period

            def ids(m: re.Match[str], copy: int = copy) -> str:
                value = m.group(2)
                tail = int(value[-8:], 16) ^ (copy * 2654435761 % 2**32)
                return f'"{m.group(1)}":"{value[:-8]}{tail:08x}"'

            def at(m: re.Match[str], shift: int = shift) -> str:
                return f'"{m.group(1)}":"{int(m.group(2)) + shift}"'

            chunk = _TIME.sub(at, _ID.sub(ids, text))
            out.write(chunk)
            written += len(chunk)
            copy += 1
    return out_path.stat().st_size


def measure(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Run ``command`` in ``cwd`` (not the repository: ``$PYTHONPATH`` decides which spanspec);
    return (seconds, peak RSS in MB, exit code)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
        print(f"    {' '.join(command[2:5])}: exit {proc.returncode}: {err}", file=sys.stderr)
    return seconds, usage.ru_maxrss / 1024, proc.returncode


def commands(run: Path, out: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "spanspec.cli"]
    return {
        "view": [*cli, "view", str(run / "telemetry" / "traces.jsonl")],
        "live-check": [*cli, "live-check", str(run / "telemetry")],
        "report": [*cli, "report", str(run), "-o", str(out / "report.html")],
        "diff": [*cli, "diff", str(run), str(run)],
        "breakdown": [
            sys.executable,
            "-c",
            "import sys; from spanspec.traces.breakdown import step_breakdown; "
            "print(step_breakdown(sys.argv[1]))",
            str(run / "telemetry" / "traces.jsonl"),
        ],
    }


def before_tree(rev: str, into: Path) -> Path:
    """That commit's ``spanspec`` package, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", rev, "spanspec"], cwd=ROOT, capture_output=True, check=True
    )
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def real_run(into: Path) -> Path:
    """A short real GRPO run (the tiny config, 4 steps); returns its trace file."""
    subprocess.run(
        [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={into}",
            "logger.tqdm=false",
            "grpo.max_steps=4",
            "grpo.num_prompts_per_step=8",
            "grpo.val_period=1000",
            "checkpointing.enabled=false",
            "telemetry.exporter=file",
            "telemetry.span_groups=per_step",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return into / "telemetry" / "traces.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a real run's traces.jsonl to copy")
    parser.add_argument("--sizes", default="100,1000", help="run sizes in MB (default 100,1000)")
    parser.add_argument("--before", metavar="REV", help="also run that commit's readers")
    parser.add_argument("--only", help="comma list of commands to run (default all)")
    parser.add_argument("--keep", type=Path, help="write the synthetic runs here and keep them")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_readers_"))
    try:
        source = args.source or real_run(work / "source")
        old = before_tree(args.before, work / "before") if args.before else None
        env = dict(os.environ)
        print(f"source: {source} ({source.stat().st_size / 1e3:.0f} kB)")
        print(f"{'run':>7} {'command':11} {'now s':>7} {'MB/s':>6} {'peak MB':>8}", end="")
        print(f"  {'before s':>8} {'MB/s':>6} {'peak MB':>8}" if old else "")
        for size in (int(s) for s in args.sizes.split(",")):
            run = (args.keep or work) / f"run_{size}MB"
            if not (run / "telemetry" / "traces.jsonl").exists():
                make_run(source, run, size)
            megabytes = (run / "telemetry" / "traces.jsonl").stat().st_size / 1e6
            for name, command in commands(run, work).items():
                if args.only and name not in args.only.split(","):
                    continue
                seconds, peak, _ = measure(command, env, work)
                line = (
                    f"{megabytes:6.0f}M {name:11} {seconds:7.1f} {megabytes / seconds:6.1f} "
                    f"{peak:8.0f}"
                )
                if old and (name != "diff"):
                    before_env = {**env, "PYTHONPATH": str(old)}
                    seconds, peak, _ = measure(command, before_env, work)
                    line += f"  {seconds:8.1f} {megabytes / seconds:6.1f} {peak:8.0f}"
                elif old:
                    line += f"  {'(none)':>8}"
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
