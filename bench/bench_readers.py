"""How fast the trace readers read, and how much memory they hold, on 1 GB files of five shapes.

    python bench/bench_readers.py                       # makes a small real run first (~1 min)
    python bench/bench_readers.py --source RUN/telemetry/traces.jsonl --sizes 200,1000
    python bench/bench_readers.py --shapes giant-step,tiny-steps --only report,diff
    python bench/bench_readers.py --before 4dea668      # also the readers of that commit

Each file is written streamed, shape by shape (:data:`SHAPES`), and removed after its rows:
``copies`` (copies of a real run's ``traces.jsonl`` one after another, each under fresh trace
and span ids and step numbers, its times shifted past the previous copy's: one long run),
``same-times`` (the copies at the SAME times), ``giant-step`` (one step span over millions of
worker spans on four ranks), ``tiny-steps`` (steps of two spans each, about 2,000 a MB) and
``many-runs`` (each copy under its own ``rl.run_id``). Each command (``view``, ``live-check``,
``report``, ``diff`` of the run against itself with ``--warmup 0``, and the end-of-run
breakdown, ``step_breakdown``) runs in its own process; the table gives its wall time, MB/s of
trace file and peak RSS (``wait4``'s ``ru_maxrss``). With ``--before REV`` the same commands run
on that commit's ``spanspec`` (``git archive``) beside them, where the command exists there.
Target: every command reads each 1 GB file within 256 MB.
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
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
_ID = re.compile(r'"(traceId|spanId|parentSpanId)":"([0-9a-f]+)"')
_TIME = re.compile(r'"(startTimeUnixNano|endTimeUnixNano|timeUnixNano)":"(\d+)"')
_STEP_NUMBER = re.compile(r'("key":"rl\.iteration","value":\{"intValue":")(\d+)')
_RUN_ID = re.compile(r'\{"key":"rl\.run_id","value":\{"stringValue":"[^"]*"\}\},?')
_RESOURCE = '"resource":{"attributes":['
SHAPES = ("copies", "same-times", "giant-step", "tiny-steps", "many-runs")
"""copies: the source again and again, each copy later than the last (one long run);
same-times: the copies under fresh trace ids and step numbers at the SAME times (a reader
that releases by time alone releases nothing); giant-step: one step span over a huge number
of child spans; tiny-steps: steps of two spans, as many as fill the size; many-runs: the
copies under a different run id each (``rl.run_id`` on the resource)."""


def _copies(text: str, out: TextIO, want: int, shift_times: bool, run_ids: bool) -> None:
    """Copies of ``text`` under fresh ids (and step numbers), until ``want`` bytes."""
    times = [int(m.group(2)) for m in _TIME.finditer(text)]
    period = max(times) - min(times) + 1_000_000_000
    numbers = [int(m.group(2)) for m in _STEP_NUMBER.finditer(text)]
    step_period = max(numbers, default=0) + 1
    if run_ids:
        text = _RUN_ID.sub("", text)
    written = copy = 0
    while written < want:
        shift = copy * period if shift_times else 0

        def ids(m: re.Match[str], copy: int = copy) -> str:
            value = m.group(2)
            tail = int(value[-8:], 16) ^ (copy * 2654435761 % 2**32)
            return f'"{m.group(1)}":"{value[:-8]}{tail:08x}"'

        def at(m: re.Match[str], shift: int = shift) -> str:
            return f'"{m.group(1)}":"{int(m.group(2)) + shift}"'

        def number(m: re.Match[str], copy: int = copy) -> str:
            return f"{m.group(1)}{int(m.group(2)) + copy * step_period}"

        chunk = _STEP_NUMBER.sub(number, _ID.sub(ids, text))
        if shift:
            chunk = _TIME.sub(at, chunk)
        if run_ids:
            run = _attr("rl.run_id", f"run-{copy:06d}") + ","
            chunk = chunk.replace(_RESOURCE, _RESOURCE + run)
        out.write(chunk)
        written += len(chunk)
        copy += 1


def _span(
    trace: str, span: int, parent: int | None, name: str, start: int, end: int, attrs: str = ""
) -> str:
    up = f'"parentSpanId":"{parent:016x}",' if parent is not None else ""
    return (
        f'{{"traceId":"{trace}","spanId":"{span:016x}",{up}"name":"{name}","kind":1,'
        f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{attrs}],'
        '"status":{}}'
    )


def _line(resource: str, spans: list[str]) -> str:
    return (
        f'{{"resourceSpans":[{{"resource":{{"attributes":[{resource}]}},'
        f'"scopeSpans":[{{"scope":{{"name":"spanspec"}},"spans":[{",".join(spans)}]}}]}}]}}\n'
    )


def _attr(key: str, value: object) -> str:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return f'{{"key":"{key}","value":{{"{kind}":"{value}"}}}}'


_DRIVER = ",".join(
    [_attr("service.name", "nemo-rl"), _attr("rl.run_id", "bench"), _attr("rl.algorithm", "grpo")]
)
_WORKERS = [
    ",".join([_DRIVER, _attr("rl.worker.group", "policy"), _attr("rl.worker.rank", r)])
    for r in range(4)
]
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _giant_step(out: TextIO, want: int) -> None:
    """One step (a rollout, a generation) over worker spans on four ranks until ``want`` bytes;
    each line one export request of 500 spans, in end order."""
    trace = "6" * 32
    step, rollout, generation = 1, 2, 3
    written, n, t = 0, 0, T0
    while written < want:
        rank = (n // 500) % 4
        spans = []
        for _ in range(500):
            n += 1
            spans.append(_span(trace, 16 + n, generation, "rl.worker.generate", t, t + MS))
            t += MS // 4
        chunk = _line(_WORKERS[rank], spans)
        out.write(chunk)
        written += len(chunk)
    it = _attr("rl.iteration", 0)
    top = [
        _span(trace, generation, rollout, "rl.grpo.generation", T0, t + MS, it),
        _span(trace, rollout, step, "rl.grpo.rollout", T0, t + 2 * MS, it),
        _span(trace, step, None, "rl.grpo.step", T0, t + 3 * MS, it),
    ]
    out.write(_line(_DRIVER, top))


def _tiny_steps(out: TextIO, want: int) -> None:
    """Steps of a step span and one phase, one trace each, until ``want`` bytes (about 2,000
    steps a MB); 100 steps a line."""
    written, n, t = 0, 0, T0
    while written < want:
        spans = []
        for _ in range(100):
            trace = f"{n + 1:032x}"
            it = _attr("rl.iteration", n)
            spans.append(_span(trace, 2, 1, "rl.grpo.data_processing", t, t + MS, it))
            spans.append(_span(trace, 1, None, "rl.grpo.step", t, t + 2 * MS, it))
            t += 3 * MS
            n += 1
        chunk = _line(_DRIVER, spans)
        out.write(chunk)
        written += len(chunk)


def make_run(source: Path, target: Path, megabytes: float, shape: str = "copies") -> int:
    """Write ``target/telemetry/traces.jsonl`` of about ``megabytes`` MB in ``shape`` (see
    :data:`SHAPES`), streamed; returns its size in bytes."""
    folder = target / "telemetry"
    folder.mkdir(parents=True, exist_ok=True)
    out_path = folder / "traces.jsonl"
    want = int(megabytes * 1_000_000)
    with out_path.open("w") as out:
        if shape == "giant-step":
            _giant_step(out, want)
        elif shape == "tiny-steps":
            _tiny_steps(out, want)
        else:
            text = source.read_text()
            if not text.endswith("\n"):
                text += "\n"
            _copies(text, out, want, shape != "same-times", shape == "many-runs")
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
        "diff": [*cli, "diff", "--warmup", "0", str(run), str(run)],  # a run may have one step
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
    parser.add_argument("--sizes", default="1000", help="run sizes in MB (default 1000)")
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help=f"comma list of {', '.join(SHAPES)} (all)"
    )
    parser.add_argument("--before", metavar="REV", help="also run that commit's readers")
    parser.add_argument("--only", help="comma list of commands to run (default all)")
    parser.add_argument("--keep", type=Path, help="write the synthetic runs here and keep them")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if unknown := [s for s in shapes if s not in SHAPES]:
        parser.error(f"--shapes: unknown {', '.join(unknown)}; shapes: {', '.join(SHAPES)}")
    work = Path(tempfile.mkdtemp(prefix="bench_readers_"))
    try:
        source = args.source or real_run(work / "source")
        old = before_tree(args.before, work / "before") if args.before else None
        env = dict(os.environ)
        print(f"source: {source} ({source.stat().st_size / 1e3:.0f} kB)")
        print(
            f"{'shape':10} {'run':>7} {'command':11} {'now s':>7} {'MB/s':>6} {'peak MB':>8}",
            end="",
        )
        print(f"  {'before s':>8} {'MB/s':>6} {'peak MB':>8}" if old else "")
        for size in (float(s) for s in args.sizes.split(",")):
            for shape in shapes:
                run = (args.keep or work) / f"{shape}_{size:g}MB"
                if not (run / "telemetry" / "traces.jsonl").exists():
                    make_run(source, run, size, shape)
                megabytes = (run / "telemetry" / "traces.jsonl").stat().st_size / 1e6
                for name, command in commands(run, work).items():
                    if args.only and name not in args.only.split(","):
                        continue
                    seconds, peak, _ = measure(command, env, work)
                    line = (
                        f"{shape:10} {megabytes:6.0f}M {name:11} {seconds:7.1f} "
                        f"{megabytes / seconds:6.1f} {peak:8.0f}"
                    )
                    if old and (name != "diff"):
                        before_env = {**env, "PYTHONPATH": str(old)}
                        seconds, peak, _ = measure(command, before_env, work)
                        line += f"  {seconds:8.1f} {megabytes / seconds:6.1f} {peak:8.0f}"
                    elif old:
                        line += f"  {'(none)':>8}"
                    print(line, flush=True)
                if not args.keep:  # a 1 GB run a shape: one on disk at a time
                    shutil.rmtree(run, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
