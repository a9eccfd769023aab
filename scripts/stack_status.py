"""What the local observability stack holds, per run: `observability_stack.sh status [RUN_ID]`.

    <stack venv>/bin/python scripts/stack_status.py --phoenix URL --prometheus URL \
        --rotel-log PATH --bridge-log PATH [RUN_ID]

Without a run id: the runs Prometheus knows (their id, project and processes). With one: the
spans Phoenix holds for the run's project (found from the run's ``target_info`` in Prometheus,
or given with ``--project``), the series and the last step Prometheus holds, and every batch
rotel or the metrics bridge refused or dropped, so a loss one hop away shows without reading
logs. Runs in the stack's
venv (Phoenix's client); Prometheus is read through its HTTP API. Exit code 0, or 2 when a part
cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

RUN_LABEL = "rl_run_id"  # the run attribute (rl.run_id) as the runs label their series
STEP_COUNT = "rl_step_duration_seconds_count"  # one count per step, per process that steps
LOOKBACK_S = 7 * 24 * 3600
# rotel writes a line like `WARN ... Exporting failed, dropping data. error=Http(405)`; the bridge
# `metrics-bridge: ERROR: Prometheus ...: HTTP 400: out of order sample`.
_ROTEL_TROUBLE = re.compile(r"(ERROR|WARN)|dropping|refused|failed", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _get(url: str, params: dict[str, str | list[str]] | None = None) -> dict:
    query = urllib.parse.urlencode(params or {}, doseq=True)
    with urllib.request.urlopen(f"{url}?{query}" if query else url, timeout=10) as response:
        return json.load(response)


def _series(prometheus: str, selector: str) -> list[dict[str, str]]:
    now = time.time()
    body = _get(
        f"{prometheus}/api/v1/series",
        {"match[]": [selector], "start": str(now - LOOKBACK_S), "end": str(now)},
    )
    return body["data"]


def _last(prometheus: str, selector: str) -> float | None:
    expr = f"max(last_over_time({selector}[{LOOKBACK_S}s]))"
    result = _get(f"{prometheus}/api/v1/query", {"query": expr})["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def runs(prometheus: str) -> list[str]:
    """One line per run Prometheus holds: its id, project and how many processes pushed."""
    lines = []
    by_run: dict[str, list[dict[str, str]]] = {}
    for labels in _series(prometheus, f'target_info{{{RUN_LABEL}!=""}}'):
        by_run.setdefault(labels[RUN_LABEL], []).append(labels)
    for run_id, infos in sorted(by_run.items()):
        project = infos[0].get("service_namespace", "?")
        lines.append(f"  {run_id}  project {project}, {len(infos)} processes")
    return lines or ["  (none yet)"]


def prometheus_lines(prometheus: str, run_id: str) -> tuple[list[str], str | None]:
    """What Prometheus holds for ``run_id``, and the run's project (from its ``target_info``)."""
    selector = f'{{{RUN_LABEL}="{run_id}"}}'
    series = _series(prometheus, selector)
    if not series:
        return [f'Prometheus  {prometheus}: no series with {RUN_LABEL}="{run_id}"'], None
    names = Counter(s["__name__"] for s in series)
    infos = [s for s in series if s["__name__"] == "target_info"]
    project = infos[0].get("service_namespace") if infos else None
    processes = sorted(
        {f"{s.get('rl_worker_group', '?')}/{s.get('rl_worker_rank', '?')}" for s in infos}
    )
    steps = _last(prometheus, f'{STEP_COUNT}{{{RUN_LABEL}="{run_id}"}}')
    shown = ", ".join(sorted(n for n in names if n != "target_info" and not n.endswith("_bucket")))
    return [
        f"Prometheus  {prometheus}: {len(series)} series of {len(names)} metrics from "
        f"{len(processes)} processes ({', '.join(processes)})",
        f"            steps: {int(steps) if steps is not None else 'none'} ({STEP_COUNT})",
        f"            metrics: {shown}",
    ], project


def phoenix_lines(phoenix: str, project: str | None) -> list[str]:
    """The spans and traces Phoenix holds for ``project``."""
    if project is None:
        return [f"Phoenix     {phoenix}: project unknown (give --project NAME)"]
    from phoenix.client import Client

    try:
        client = Client(base_url=phoenix)
        if project not in {p["name"] for p in client.projects.list()}:
            return [f"Phoenix     {phoenix}: no project '{project}'"]
        spans = client.spans.get_spans(project_identifier=project, limit=1_000_000)
    except Exception as exc:  # httpx's errors: Phoenix down or not answering
        return [f"Phoenix     {phoenix}: cannot be read ({type(exc).__name__}: {exc})"]
    traces = {s["context"]["trace_id"] for s in spans}
    names = Counter(s["name"] for s in spans)
    steps = sum(n for name, n in names.items() if name.endswith(".step"))
    return [
        f"Phoenix     {phoenix}: {len(spans)} spans in {len(traces)} traces "
        f"(project {project}), {steps} step spans"
    ]


def log_lines(name: str, log: Path) -> list[str]:
    """Every batch ``name`` (rotel, the bridge) refused or dropped since it started (its log), or
    that there is none."""
    try:
        text = _ANSI.sub("", log.read_text(errors="replace"))
    except OSError as exc:
        return [f"{name:<11} cannot read {log}: {exc.strerror}"]
    trouble = [line.strip() for line in text.splitlines() if _ROTEL_TROUBLE.search(line)]
    if not trouble:
        return [f"{name:<11} no refused or dropped batch since it started"]
    return [
        f"{name:<11} {len(trouble)} refused or dropped batches since it started (log {log}); "
        f"last: {trouble[-1][:300]}"
    ]


def hop_lines(rotel_log: Path, bridge_log: Path) -> list[str]:
    """What the two hops between a run and the backends refused or dropped."""
    return log_lines("rotel", rotel_log) + log_lines("bridge", bridge_log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_id", nargs="?")
    parser.add_argument("--phoenix", required=True)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--rotel-log", type=Path, required=True)
    parser.add_argument("--bridge-log", type=Path, required=True)
    parser.add_argument("--project", help="the run's Phoenix project, when Prometheus lacks it")
    args = parser.parse_args(argv)
    try:
        if args.run_id is None:
            print("runs in Prometheus (status RUN_ID for one):")
            print("\n".join(runs(args.prometheus)))
            print("\n".join(hop_lines(args.rotel_log, args.bridge_log)))
            return 0
        lines, project = prometheus_lines(args.prometheus, args.run_id)
        print(f"run {args.run_id}:")
        print("\n".join(phoenix_lines(args.phoenix, args.project or project)))
        print("\n".join(lines))
        print("\n".join(hop_lines(args.rotel_log, args.bridge_log)))
    except (urllib.error.URLError, OSError) as exc:
        print(f"stack: error: cannot read the stack: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
