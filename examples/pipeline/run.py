"""A small batch data pipeline traced with spanspec: load -> transform -> write, per batch, with
each batch's rows transformed by a few worker processes.

It imports spanspec and nothing of nemo_rl. Its registry (``registry.yaml``, next to this file)
declares its spans and what it calls things: the env prefix of its settings
(``PIPELINE_OTEL_*``), what one step is (``pipeline.batch``, numbered by
``pipeline.batch.index``), the attribute naming a run (``pipeline.run_id``) and a process's
lane (``pipeline.process.role``, ``pipeline.process.index``). It wires telemetry up as any
program would: :func:`spanspec.settings.load_settings` with the registry's conventions,
:func:`spanspec.export.setup`, :func:`spanspec.activate`; the workers read the same settings
from the environment the main process wrote, and their spans join each batch's trace through
:mod:`spanspec.propagate`.

    python examples/pipeline/run.py --out runs/pipeline
    spanspec view runs/pipeline --step 1            # the registry is named on the traces
    spanspec report runs/pipeline -o runs/pipeline/report.html
    spanspec live-check runs/pipeline

Settings come from ``PIPELINE_OTEL_*`` variables (``PIPELINE_OTEL_SPAN_GROUPS=all`` puts the
batches under one run span); ``--out`` is the default folder of the trace files and of the
pipeline's output. Exit codes: 0 done, 2 bad arguments or settings (one line, no traceback).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import spanspec
from spanspec import export, propagate
from spanspec.settings import Settings, SettingsError, load_settings
from spanspec.spec import GROUPS_RESOURCE_ATTRIBUTE, REGISTRY_RESOURCE_ATTRIBUTE, Spec

REGISTRY = Path(__file__).resolve().parent / "registry.yaml"
NAME = "word-stats"
SOURCE = "synthetic"
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


# -- telemetry, as any program sets it up ---------------------------------------------------------


def start_telemetry(spec: Spec, settings: Settings, role: str, index: int, processes: int) -> Any:
    """Build this process's exporters and switch on the spans its settings enable.

    Returns:
        The :class:`spanspec.export.TelemetryHandle` (shut it down at the end).
    """
    handle = export.setup(
        settings,
        rank=index,
        world_size=processes,
        resource={
            spec.conventions.run_attribute: settings.run_id,
            "pipeline.process.role": role,
            "pipeline.process.index": index,
            "pipeline.name": NAME,
            "pipeline.source": SOURCE,
            # For the readers: `spanspec view/report/live-check` find the registry without
            # --registry, and live-check knows which groups were on.
            REGISTRY_RESOURCE_ATTRIBUTE: spec.source,
            GROUPS_RESOURCE_ATTRIBUTE: ",".join(sorted(spec.resolve(settings.span_groups))),
        },
        register_atexit=False,
        # With the console exporter, the main process's stdout carries every process's lines.
        console_owner=index == 0,
    )
    spanspec.activate(spec, groups=settings.span_groups, tracer_provider=handle.tracer_provider)
    return handle


# -- the pipeline ---------------------------------------------------------------------------------


def load(index: int, rows: int) -> list[str]:
    """The batch's rows: sentences of a few words, the same for the same batch."""
    out = []
    for row in range(rows):
        n = 3 + (index * 7 + row) % 5
        out.append(" ".join(WORDS[(index + row * k) % len(WORDS)] for k in range(n)))
    time.sleep(0.005)  # reading takes a little time
    return out


def transform(rows: list[str]) -> list[dict[str, Any]]:
    """One record per row: its words counted, the longest one."""
    return [
        {"words": len(r.split()), "longest": max(r.split(), key=len), "chars": len(r)} for r in rows
    ]


def worker(index: int, processes: int, tasks: Any, results: Any) -> None:
    """A worker process: transform each share of a batch it is given, under the batch's trace."""
    spec = spanspec.load(REGISTRY)
    # The settings the main process wrote to PIPELINE_OTEL_* (its env prefix, from the registry).
    settings = load_settings(env=os.environ, conventions=spec.conventions)
    handle = start_telemetry(spec, settings, "worker", index, processes)
    try:
        while (task := tasks.get()) is not None:
            carrier, batch, rows = task
            with propagate.attached(carrier):
                attributes = {"pipeline.batch.index": batch, "pipeline.rows": len(rows)}
                with spanspec.span("pipeline.worker.transform", **attributes):
                    time.sleep(0.01 * index)  # workers are not all equally fast
                    results.put((batch, transform(rows)))
    finally:
        handle.shutdown()


def run(out: Path, batches: int, rows: int, workers: int) -> int:
    """Process ``batches`` batches of ``rows`` rows, each batch's rows dealt out to ``workers``
    worker processes.

    Returns:
        The number of records written.
    """
    context = multiprocessing.get_context("spawn")
    # One queue per worker: share i of every batch goes to worker i.
    tasks = [context.Queue() for _ in range(workers)]
    results = context.Queue()
    pool = [
        context.Process(target=worker, args=(i + 1, workers + 1, tasks[i], results))
        for i in range(workers)
    ]
    for process in pool:
        process.start()
    written = 0
    (out / "output").mkdir(parents=True, exist_ok=True)
    try:
        with spanspec.span("pipeline.run", **{"pipeline.name": NAME, "pipeline.batches": batches}):
            for batch in range(batches):
                it = {"pipeline.batch.index": batch}
                with spanspec.span("pipeline.batch", **it):
                    with spanspec.span("pipeline.load", **it, **{"pipeline.rows": rows}):
                        lines = load(batch, rows)
                    with spanspec.span("pipeline.transform", **it, **{"pipeline.rows": rows}):
                        parts = [lines[i::workers] for i in range(workers)]
                        for queue, part in zip(tasks, parts, strict=True):
                            queue.put((propagate.inject(), batch, part))
                        records = [r for _ in parts for r in results.get(timeout=60)[1]]
                    target = out / "output" / f"batch_{batch:04d}.jsonl"
                    with spanspec.span(
                        "pipeline.write", **it, **{"pipeline.output.path": str(target)}
                    ):
                        target.write_text("".join(json.dumps(r) + "\n" for r in records))
                        written += len(records)
    finally:
        for queue in tasks:
            queue.put(None)
        for process in pool:
            process.join(timeout=30)
    return written


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline; return the exit code (0 done, 2 bad arguments or settings)."""
    parser = argparse.ArgumentParser(
        prog="examples/pipeline/run.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="folder of traces and output")
    parser.add_argument("--batches", type=int, default=4, help="batches to process (default 4)")
    parser.add_argument("--rows", type=int, default=60, help="rows per batch (default 60)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    for name in ("batches", "rows", "workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    spec = spanspec.load(REGISTRY)
    try:
        # Env (PIPELINE_OTEL_*) over the program's defaults over spanspec's; every process of
        # the run shares one run id and writes into the same folder.
        settings = load_settings(
            env=os.environ,
            conventions=spec.conventions,
            defaults={"file_dir": str(args.out.resolve()), "export_strategy": "all_ranks"},
        )
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings.run_id is None:
        settings = settings.with_values("generated", run_id=secrets.token_hex(6))
    for key, value in settings.to_env().items():  # what the workers read back
        os.environ.setdefault(key, value)

    handle = start_telemetry(spec, settings, "main", 0, args.workers + 1)
    try:
        written = run(args.out, args.batches, args.rows, args.workers)
    finally:
        handle.shutdown()
    print(f"run {settings.run_id}: {written} records in {args.out / 'output'}")
    if settings.enabled and "file" in settings.exporters:
        from spanspec.traces.breakdown import step_breakdown

        traces = Path(settings.file_dir) / "traces.jsonl"
        print(step_breakdown(traces, spec, run_id=settings.run_id))
        print(f"traces: {traces}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
