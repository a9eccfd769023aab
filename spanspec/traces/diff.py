"""Did a change make a run slower? Two runs compared step by step, with the noise accounted for.

``spanspec diff BASELINE CANDIDATE`` calls :func:`diff_runs`. Each run is read in one pass
(:mod:`spanspec.traces.steps`); every phase (a path of span names below the step span, as the
breakdown counts them), the whole step and each efficiency bucket gives one sample per step in
each run. A row is called ``slower`` or ``faster`` only when both hold:

- the two-sided Mann-Whitney U test over the per-step seconds (:mod:`spanspec.traces.stats`)
  gives ``p < alpha``: the steps of one run are not drawn from the same distribution as the
  other's; and
- the ratio of the medians (candidate / baseline) is beyond ``1 ± threshold`` and the medians
  differ by at least the noise floor: ``min_seconds``, and ``min_share`` of the baseline step's
  median (a phase of 2 ms in a 1 s step doubling on a busy machine is not news; the scheduler
  alone moves it that much).

Otherwise it is ``same``. The first ``warmup`` steps of each run (start-up, first compilation)
are left out. The run's telemetry cost (spans and trace bytes per step) and the metrics both
runs recorded (the mean of their last ``last`` points) are shown side by side, without a verdict.
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from spanspec.spec import Spec
from spanspec.traces.otlp_json import TraceStream, attribute_value, existing_trace_files
from spanspec.traces.stats import mann_whitney_u, median, sorted_array
from spanspec.traces.steps import StepTimes, iter_steps

__all__ = ["DiffError", "Row", "RunDiff", "RunSide", "diff_runs", "read_run"]

METRICS_FILE = "metrics.jsonl"  # what the file exporter writes metrics to


class DiffError(Exception):
    """Bad input for a comparison: one line saying what and where."""


Key = tuple[Any, ...]  # ("step",), ("phase", path), ("bucket", name)

_NO_NUMBER = -(2**63)  # a step without a step number, in an array("q")


class Iterations(Sequence[int | None]):
    """A run's step numbers, in step order: 8 bytes a step (a list would hold an int object
    each), ``None`` where a step has no number."""

    def __init__(self, numbers: Iterable[int | None] = ()) -> None:
        self._numbers = array("q")
        for n in numbers:
            self.append(n)

    def append(self, number: int | None) -> None:
        fits = number is not None and _NO_NUMBER < number < 2**63
        self._numbers.append(number if fits else _NO_NUMBER)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, index: int) -> int | None: ...
    @overload
    def __getitem__(self, index: slice) -> Iterations: ...
    def __getitem__(self, index: int | slice) -> int | Iterations | None:
        if isinstance(index, slice):
            part = Iterations()
            part._numbers = self._numbers[index]
            return part
        n = self._numbers[index]
        return None if n == _NO_NUMBER else n

    def __iter__(self) -> Iterator[int | None]:
        return (None if n == _NO_NUMBER else n for n in self._numbers)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented


@dataclass
class RunSide:
    """One run as the comparison reads it: per step, in start order, the seconds of the step, of
    each phase (the mean over the lanes that ran it) and of each bucket, in ``samples`` (one
    array per row, NaN where a step lacks the phase): a few numbers a step, never its spans."""

    path: str
    run_id: str | None
    steps: int
    step_names: list[str]
    samples: dict[Key, array] = field(default_factory=dict)
    iterations: Sequence[int | None] = field(default_factory=Iterations)
    files: list[str] = field(default_factory=list)
    spans: int = 0
    bytes: int = 0
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def values(self, key: Key, start: int = 0, stop: int | None = None) -> array:
        """The row's seconds in steps ``start:stop`` that have it (8 bytes a step)."""
        got = self.samples.get(key)
        if got is None:
            return array("d")
        return array("d", (v for v in got[start:stop] if not math.isnan(v)))

    def part(self, start: int, stop: int | None = None, path: str | None = None) -> RunSide:
        """The steps ``start:stop`` of this run, as a run of their own."""
        return replace(
            self,
            path=path or self.path,
            steps=len(self.iterations[start:stop]),
            samples={k: v[start:stop] for k, v in self.samples.items()},
            iterations=self.iterations[start:stop],
        )


class _SideFold:
    """Builds a :class:`RunSide`'s samples from steps as they are closed."""

    def __init__(self) -> None:
        self.samples: dict[Key, array] = {}
        self.starts = array("Q")  # 8 bytes a step, not a Python int
        self.iterations = Iterations()
        self.names: set[str] = set()
        self.spans = 0

    def add(self, step: StepTimes) -> None:
        n = len(self.starts)
        self.starts.append(step.start_unix_nano)
        self.iterations.append(step.iteration)
        self.names.add(step.name)
        self.spans += 1 + sum(step.counts.values())
        row = {("step",): step.seconds}
        for path in step.phases:
            row[("phase", path)] = step.phase_seconds(path) or 0.0
        for bucket, seconds in step.buckets.items():
            row[("bucket", bucket)] = seconds
        for key, value in row.items():
            got = self.samples.get(key)
            if got is None:
                got = self.samples[key] = array("d", [math.nan] * n)
            got.append(value)
        for got in self.samples.values():
            if len(got) == n:  # a row this step does not have
                got.append(math.nan)

    def side(self, path: str, run_id: str | None) -> RunSide:
        starts = self.starts
        if all(starts[i] <= starts[i + 1] for i in range(len(starts) - 1)):  # closed in order
            samples, iterations = self.samples, self.iterations
        else:
            order = sorted(range(len(starts)), key=starts.__getitem__)
            samples = {k: array("d", (v[i] for i in order)) for k, v in self.samples.items()}
            iterations = Iterations(self.iterations[i] for i in order)
        return RunSide(
            path=path,
            run_id=run_id,
            steps=len(starts),
            step_names=sorted(self.names),
            samples=samples,
            iterations=iterations,
            spans=self.spans,
        )


@dataclass(frozen=True)
class Row:
    """One compared quantity: a phase, the step, a bucket."""

    kind: str  # "step", "phase", "bucket"
    name: str
    depth: int
    base_steps: int
    cand_steps: int
    base_mean: float
    cand_mean: float
    base_median: float
    cand_median: float
    ratio: float | None
    p: float | None
    verdict: str  # slower | faster | same | only in baseline | only in candidate


@dataclass
class RunDiff:
    """The comparison: its method, rows, telemetry cost and metrics; ``exit_code`` for CI."""

    baseline: RunSide
    candidate: RunSide
    method: dict[str, Any]
    rows: list[Row]
    telemetry: list[dict[str, Any]]
    metrics: list[dict[str, Any]]

    @property
    def slower(self) -> list[Row]:
        """The phases (and the step) called slower."""
        return [r for r in self.rows if r.kind != "bucket" and r.verdict == "slower"]

    @property
    def exit_code(self) -> int:
        """1 when a phase or the step is significantly slower beyond the threshold, else 0."""
        return 1 if self.slower else 0

    def header(self) -> str:
        m = self.method
        return (
            f"method: two-sided Mann-Whitney U over per-step seconds (normal approximation, tie "
            f"and continuity corrections), alpha {m['alpha']}; a row is slower/faster only when "
            f"p < alpha and the ratio of medians is beyond 1 ± {m['threshold']:.0%} and the "
            f"medians differ by >= {m['floor_seconds']:.4g} s (the larger of {m['min_seconds']} s "
            f"and {m['min_share']:.0%} of the baseline's median step); first {m['warmup']} "
            "step(s) of each run left out"
        )

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (what ``--format json`` prints)."""

        def side(r: RunSide) -> dict[str, Any]:
            return {
                "path": r.path,
                "run_id": r.run_id,
                "steps": r.steps,
                "step_names": r.step_names,
                "files": r.files,
            }

        return {
            "baseline": side(self.baseline),
            "candidate": side(self.candidate),
            "method": self.method,
            "rows": [_finite(asdict(r)) for r in self.rows],
            "telemetry": _finite(self.telemetry),
            "metrics": _finite(self.metrics),
            "slower": [r.name for r in self.slower],
            "exit_code": self.exit_code,
        }

    def __str__(self) -> str:
        b, c = self.baseline, self.candidate
        lines = [
            f"baseline:  {b.path} (run {b.run_id or '-'}, {b.steps} steps)",
            f"candidate: {c.path} (run {c.run_id or '-'}, {c.steps} steps)",
            self.header(),
            "",
            f"  {'':44} {'steps':^9} {'median s':^17} {'mean s':^17}",
            f"  {'phase':44} {'base/cand':>9} {'base':>8} {'cand':>8} {'base':>8} {'cand':>8} "
            f"{'ratio':>6} {'p':>6}  verdict",
        ]
        for r in self.rows:
            label = ("  " * r.depth + r.name) if r.kind != "bucket" else f"bucket {r.name}"
            ratio = (
                f"{r.ratio:6.2f}" if r.ratio is not None and math.isfinite(r.ratio) else "     -"
            )
            p = f"{r.p:6.3f}" if r.p is not None else "     -"
            lines.append(
                f"  {label:44} {r.base_steps:>4}/{r.cand_steps:<4} "
                f"{r.base_median:8.3f} {r.cand_median:8.3f} {r.base_mean:8.3f} {r.cand_mean:8.3f} "
                f"{ratio} {p}  {r.verdict}"
            )
        lines += ["", "telemetry cost (no verdict):"]
        for t in self.telemetry:
            lines.append(f"  {t['name']:44} {_num(t['baseline']):>12} {_num(t['candidate']):>12}")
        if self.metrics:
            lines += ["", f"metrics, mean of the last {self.method['last']} points (no verdict):"]
            for m in self.metrics:
                lines.append(
                    f"  {m['name']:44} {_num(m['baseline']):>12} {_num(m['candidate']):>12}"
                )
        slower = ", ".join(r.name for r in self.slower)
        lines += ["", f"slower: {slower}" if slower else "no phase is slower"]
        return "\n".join(lines)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def read_run(path: str | os.PathLike[str], spec: Spec, run_id: str | None = None) -> RunSide:
    """Read one run's steps (and its metrics file, where there is one) in one pass.

    With several runs in the files and no ``run_id``, the latest run (by its first step) counts.

    Raises:
        DiffError: for a missing path, no or unreadable trace files, bad lines, or no steps.
    """
    p = Path(path)
    try:
        files = existing_trace_files(p)
    except ValueError as exc:
        raise DiffError(str(exc)) from None
    stream = TraceStream(files)
    folds: dict[str | None, _SideFold] = {}
    for step in iter_steps(stream.merged(), spec, run_id):
        fold = folds.get(step.run_id)
        if fold is None:
            fold = folds[step.run_id] = _SideFold()
        fold.add(step)
    bad = [f for f in stream.findings if f.level == "violation"]
    if bad:
        fix = " (fix or remove the line, then compare again)" if bad[0].line else ""
        raise DiffError(f"{bad[0]}{fix}")
    if not folds:
        from spanspec.traces.breakdown import _no_steps

        raise DiffError(f"{p}: {_no_steps(spec)}; nothing to compare")
    # Several runs in the files: the latest (by its first step) unless one was asked for.
    chosen = max(folds, key=lambda r: min(folds[r].starts))
    side = folds[chosen].side(str(p), chosen)
    side.files = [str(f) for f in files]
    side.bytes = stream.bytes
    side.metrics = _read_metrics([f.with_name(METRICS_FILE) for f in files], spec, side.run_id)
    return side


def _read_metrics(paths: Sequence[Path], spec: Spec, run_id: str | None) -> dict[str, list[float]]:
    """Gauge and sum points of the file exporter's metrics files, per metric, in time order.
    A file that is missing or unreadable (or a bad line) is skipped: metrics are shown, not
    judged."""
    points: dict[str, list[tuple[int, float]]] = {}
    run_key = spec.conventions.run_attribute
    for path in paths:
        try:
            handle = open(path, encoding="utf-8", errors="replace")
        except OSError:
            continue
        with handle:
            for line in handle:
                try:
                    request = json.loads(line)
                    for rm in request.get("resourceMetrics", []):
                        resource = {
                            a["key"]: attribute_value(a.get("value"))
                            for a in (rm.get("resource") or {}).get("attributes", [])
                        }
                        if run_id and run_key and resource.get(run_key) not in (None, run_id):
                            continue
                        for sm in rm.get("scopeMetrics", []):
                            for m in sm.get("metrics", []):
                                data = m.get("gauge") or m.get("sum")
                                for dp in (data or {}).get("dataPoints", []):
                                    value = dp.get("asDouble", dp.get("asInt"))
                                    if value is None:
                                        continue
                                    t = int(dp.get("timeUnixNano", 0))
                                    points.setdefault(m["name"], []).append((t, float(value)))
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    continue
    return {k: [v for _, v in sorted(p)] for k, p in points.items()}


def _row(
    kind: str,
    name: str,
    depth: int,
    base: Callable[[], array],
    cand: Callable[[], array],
    threshold: float,
    alpha: float,
    floor: float,
) -> Row:
    """One row's verdict. ``base`` and ``cand`` give the row's per-step seconds: each sample is
    read, averaged and sorted (8 bytes a step) one at a time, so a row of millions of steps holds
    two sorted samples and nothing else."""
    mean_b, sorted_b = _mean_sorted(base)
    mean_c, sorted_c = _mean_sorted(cand)
    mb, mc = median(sorted_b, presorted=True), median(sorted_c, presorted=True)
    nb, nc = len(sorted_b), len(sorted_c)
    if not nb or not nc:
        verdict = "only in candidate" if nc else "only in baseline"
        return Row(kind, name, depth, nb, nc, mean_b, mean_c, mb, mc, None, None, verdict)
    ratio = mc / mb if mb > 0 else (math.inf if mc > 0 else 1.0)
    p = mann_whitney_u(sorted_c, sorted_b, presorted=True).p
    verdict = "same"
    if p < alpha and abs(mc - mb) >= floor:
        if ratio > 1 + threshold:
            verdict = "slower"
        elif ratio < 1 - threshold:
            verdict = "faster"
    return Row(kind, name, depth, nb, nc, mean_b, mean_c, mb, mc, ratio, p, verdict)


def _mean_sorted(load: Callable[[], array]) -> tuple[float, array]:
    values = load()
    return _mean(values), sorted_array(values)


def _zero_filled(side: RunSide, key: Key, warmup: int) -> array:
    """The row's seconds after ``warmup``, 0.0 for a step without it (8 bytes a step)."""
    got = side.samples.get(key)
    if got is None:
        return array("d", bytes(8 * max(0, side.steps - warmup)))
    return array("d", (0.0 if math.isnan(v) else v for v in got[warmup:]))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def diff_runs(
    baseline: RunSide,
    candidate: RunSide,
    threshold: float = 0.05,
    alpha: float = 0.05,
    warmup: int = 1,
    min_seconds: float = 0.001,
    min_share: float = 0.01,
    last: int = 5,
    force: bool = False,
) -> RunDiff:
    """Compare two runs read by :func:`read_run` (see the module's docstring for the method).

    Raises:
        DiffError: when the runs' step spans differ (different algorithms) and not ``force``,
            or when ``warmup`` leaves a run without steps.
    """
    if set(baseline.step_names) != set(candidate.step_names) and not force:
        raise DiffError(
            f"the runs have different step spans ({', '.join(baseline.step_names)} in "
            f"{baseline.path}, {', '.join(candidate.step_names)} in {candidate.path}): they ran "
            "different programs or algorithms; pass --force to compare them anyway"
        )
    for side in (baseline, candidate):
        if side.steps <= warmup:
            raise DiffError(
                f"{side.path}: {side.steps} step(s), none left after --warmup {warmup}; "
                "run more steps or pass a smaller --warmup"
            )

    # The noise floor: a change smaller than this is never a verdict, however significant.
    step_median = median(baseline.values(("step",), warmup))
    floor = max(min_seconds, min_share * step_median if math.isfinite(step_median) else 0.0)

    def row(
        kind: str, name: str, depth: int, key: Key,
        load: Callable[[RunSide, Key, int], array] = RunSide.values,
    ) -> Row:  # fmt: skip
        """``load(side, key, warmup)`` gives a side's seconds of the row (one side at a time)."""
        return _row(
            kind, name, depth,
            lambda: load(baseline, key, warmup), lambda: load(candidate, key, warmup),
            threshold, alpha, floor,
        )  # fmt: skip

    rows = [row("step", "step", 0, ("step",))]
    keys = list(dict.fromkeys([*baseline.samples, *candidate.samples]))
    paths = [k[1] for k in keys if k[0] == "phase"]
    for path in _tree_order(paths):
        rows.append(row("phase", path[-1], len(path), ("phase", path)))
    for key in keys:
        if key[0] == "bucket":
            # A step without a bucket spent no time in it.
            rows.append(row("bucket", key[1], 0, key, _zero_filled))
    telemetry = []
    for name, fb, fc in (
        ("spans per step", baseline.spans / baseline.steps, candidate.spans / candidate.steps),
        ("trace bytes per step", baseline.bytes / baseline.steps, candidate.bytes / candidate.steps),
        ("spans", baseline.spans, candidate.spans),
        ("trace bytes", baseline.bytes, candidate.bytes),
    ):  # fmt: skip
        telemetry.append({"name": name, "baseline": fb, "candidate": fc})
    metrics = [
        {
            "name": name,
            "baseline": _mean(baseline.metrics[name][-last:]),
            "candidate": _mean(candidate.metrics[name][-last:]),
        }
        for name in sorted(set(baseline.metrics) & set(candidate.metrics))
    ]
    method = {
        "test": "mann-whitney-u",
        "sided": "two-sided",
        "approximation": "normal, tie-corrected variance, continuity correction 0.5",
        "alpha": alpha,
        "threshold": threshold,
        "min_seconds": min_seconds,
        "min_share": min_share,
        "floor_seconds": floor,
        "warmup": warmup,
        "last": last,
        "statistic": "ratio of medians (candidate / baseline)",
    }
    return RunDiff(baseline, candidate, method, rows, telemetry, metrics)


def _tree_order(paths: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Paths so that each is followed by its own children, siblings first seen first."""
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for p in paths:
        children.setdefault(p[:-1], []).append(p)
    out: list[tuple[str, ...]] = []
    stack = list(reversed(children.get((), [])))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(reversed(children.get(p, [])))
    return out
