"""A run's metric curves for the report: the scalars a program logged per step, as the registry
knows them.

A program that logs its scalars as JSON lines of ``{"step": n, "<key>": value, ...}`` (a
*metrics file*) gets one curve per registry metric that declares the key under ``from:``
(``metrics.<name>.from``), in the registry's order, titled with the key as logged. Which curves
there are is the registry's and the file's business, not this module's: it names no program.

The file is found next to the traces: ``metrics.jsonl`` in the folder the reader was given, the
trace file's folder or the run folder above it, else in the run folder the trace folder's run
pointer names for the run (:data:`~spanspec.files.RUN_POINTER`: the traces were written away from
the run folder); OTLP files are skipped (the file exporter's ``metrics.jsonl`` holds
``resourceMetrics``, not rows).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spanspec.files import read_run_pointer
from spanspec.spec import Spec

__all__ = [
    "METRICS_FILE",
    "STEP_KEY",
    "find_metrics_file",
    "metric_curves",
    "read_rows",
    "step_offset",
]

METRICS_FILE = "metrics.jsonl"
"""The metrics file's name, looked for next to the trace files."""
STEP_KEY = "step"
"""The key of a row's step."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows that are JSON objects with an integer ``step``; other lines are skipped."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get(STEP_KEY), int):
                rows.append(row)
    return rows


def _is_rows_file(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            first = json.loads(f.readline() or "null")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and isinstance(first.get(STEP_KEY), int)


def find_metrics_file(
    trace_files: Sequence[Path], given: Path | None = None, run_id: str | None = None
) -> Path | None:
    """The metrics file of the run the trace files belong to: ``metrics.jsonl`` holding step
    rows in ``given`` (the folder a reader was pointed at, when a folder), the first trace file's
    folder or its parent (the run folder), else in the run folder of ``run_id`` that the trace
    folder's run pointer names; None when there is none.

    Raises:
        spanspec.files.PointerError: when the trace folder's run pointer cannot be read, or the
            run folder it names for the run does not exist.
    """
    if not trace_files:
        return None
    folder = Path(trace_files[0]).resolve().parent
    folders = [folder, folder.parent]
    if given is not None and given.is_dir():
        folders.insert(0, given)
    for candidate in (f / METRICS_FILE for f in folders):
        if candidate.is_file() and _is_rows_file(candidate):
            return candidate
    pointer = read_run_pointer(folder)
    run_folder = pointer.run_folder(run_id) if pointer is not None else None
    if run_folder is not None and _is_rows_file(run_folder / METRICS_FILE):
        return run_folder / METRICS_FILE
    return None


def metric_curves(rows: Iterable[dict[str, Any]], spec: Spec) -> list[dict[str, Any]]:
    """One curve per registry metric with ``from:`` keys, for the first of its keys the rows
    hold: ``{"key", "metric", "unit", "brief", "points": [[step, value], ...]}``, points in step
    order (the last value of a step kept), non-finite and non-numeric values left out."""
    rows = list(rows)
    present: dict[str, dict[int, float]] = {}
    for row in rows:
        step = row[STEP_KEY]
        for key, value in row.items():
            if key == STEP_KEY or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                present.setdefault(key, {})[step] = float(value)
    curves = []
    for name, metric in spec.metrics.items():
        key = next((k for k in metric.from_keys if present.get(k)), None)
        if key is None:
            continue
        curves.append(
            {
                "key": key,
                "metric": name,
                "unit": metric.unit,
                "brief": metric.brief,
                "points": [[s, v] for s, v in sorted(present[key].items())],
            }
        )
    return curves


def step_offset(curves: Sequence[dict[str, Any]], iterations: Iterable[int]) -> int:
    """How a logged step maps to a step span's number: 0 when the program logs a step under the
    number its span carries, 1 when it logs the steps done (1-based) while its spans count from 0.
    Judged on the curve with the most points (a per-step one: an evaluation logged before the
    first step would blur it); the offset that matches more of its steps to step spans wins,
    0 on a tie."""
    numbers = set(iterations)
    if not curves:
        return 0
    logged = {p[0] for p in max(curves, key=lambda c: len(c["points"]))["points"]}
    return max((0, 1), key=lambda k: (len({n - k for n in logged} & numbers), -k))
