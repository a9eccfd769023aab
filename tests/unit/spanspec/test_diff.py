"""``spanspec diff``: the statistics (checked by hand), the one-pass step reader against the
in-memory one, verdicts and exit codes on runs written with known durations, and bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import spanspec
from spanspec.traces.breakdown import compute_breakdown, step_breakdown
from spanspec.traces.otlp_json import read_spans
from spanspec.traces.stats import mann_whitney_u, median
from tests.traces import spanspec_cli
from tests.unit.spanspec.fixtures.traces import (
    grpo_steps,
    rewrite_lines,
    split_worker_spans,
    write_traces,
)

S = 1_000_000_000


def test_mann_whitney_u_matches_the_hand_computed_values():
    # No ties: U = 0, mean 12.5, variance 25/12 * 11; z = (12.5 - 0.5) / 4.787 = 2.5067.
    r = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert r.u == 0 and r.z == pytest.approx(-2.50672, abs=1e-4)
    assert r.p == pytest.approx(0.012186, abs=1e-5)
    # Ties: ranks 1, 3, 3, 5, 7 for a (R = 19, U = 4); tie groups of 3 (2s) and 2 (6s) give
    # sum(t^3 - t) = 30, variance 30/12 * (12 - 30/110) = 29.318, z = (11 - 0.5) / 5.4146.
    r = mann_whitney_u([1, 2, 2, 3, 5], [2, 4, 6, 6, 7, 9])
    assert r.u == 4 and r.z == pytest.approx(-1.93919, abs=1e-4)
    assert r.p == pytest.approx(0.052478, abs=1e-5)
    # Symmetric in the sign, and nothing to tell apart is p = 1.
    assert mann_whitney_u([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]).p == pytest.approx(0.012186, abs=1e-5)
    assert mann_whitney_u([1, 1, 1], [1, 1, 1]).p == 1.0
    assert mann_whitney_u([], [1.0]).p == 1.0


def test_median():
    assert median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5


def test_the_one_pass_reader_agrees_with_the_in_memory_breakdown(tmp_path):
    # A job span above the steps (groups=all) and worker spans in a second process.
    path = write_traces(tmp_path, grpo_steps(4), groups="all")
    split_worker_spans(path, {"rl.worker.group": "policy", "rl.worker.rank": 0})
    spec = spanspec.load()
    streamed = step_breakdown(path, spec)
    held = compute_breakdown(read_spans(path), spec)
    assert streamed.steps == held.steps == 4
    assert str(streamed) == str(held)


def _span(name: str, trace: str, sid: int, parent: int | None, a: float, b: float) -> dict:
    span = {
        "name": name,
        "traceId": trace,
        "spanId": f"{sid:016x}",
        "startTimeUnixNano": str(int(a * S)),
        "endTimeUnixNano": str(int(b * S)),
        "attributes": [],
    }
    if parent is not None:
        span["parentSpanId"] = f"{parent:016x}"
    return span


def write_run(
    folder: Path,
    updates: list[float],
    algorithm: str = "grpo",
    seed: int = 0,
    reward_s: float = 0.2,
) -> Path:
    """A run of one step per value of ``updates``: data 0.1 s and reward ``reward_s`` (each with
    2 % noise), then an update of that many seconds; one export request per step."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, update in enumerate(updates):
        t = 1e6 + 100.0 * i  # a reader skips a span that starts at 0 (1970) as impossible
        trace = f"{seed + 1:08x}{i:024x}"
        data = 0.1 + rng.uniform(-0.002, 0.002)
        reward = reward_s * (1 + rng.uniform(-0.02, 0.02))
        end = t + data + reward + update
        spans = [
            _span(f"rl.{algorithm}.data_processing", trace, 2, 1, t, t + data),
            _span(f"rl.{algorithm}.reward", trace, 3, 1, t + data, t + data + reward),
            _span(f"rl.{algorithm}.policy_update", trace, 4, 1, t + data + reward, end),
            _span(f"rl.{algorithm}.step", trace, 1, None, t, end),
        ]
        spans[-1]["attributes"] = [{"key": "rl.iteration", "value": {"intValue": str(i)}}]
        resource = {"attributes": [{"key": "rl.run_id", "value": {"stringValue": f"r{seed}"}}]}
        request = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}
        lines.append(json.dumps(request) + "\n")
    (folder / "traces.jsonl").write_text("".join(lines))
    return folder


def _noisy(base: float, n: int, seed: int, spread: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [base * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_a_slower_update_is_called_slower_and_exits_1(tmp_path):
    base = write_run(tmp_path / "base", _noisy(1.0, 12, 1), seed=1)
    cand = write_run(tmp_path / "cand", _noisy(2.0, 12, 2), seed=2)
    proc = spanspec_cli("diff", str(base), str(cand), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    verdicts = {r["name"]: r["verdict"] for r in out["rows"] if r["kind"] != "bucket"}
    assert verdicts["rl.grpo.policy_update"] == "slower"
    assert verdicts["step"] == "slower"
    assert verdicts["rl.grpo.reward"] == verdicts["rl.grpo.data_processing"] == "same"
    assert out["method"]["test"] == "mann-whitney-u" and out["method"]["threshold"] == 0.05
    assert out["slower"] == ["step", "rl.grpo.policy_update"]
    text = spanspec_cli("diff", str(base), str(cand)).stdout
    assert "Mann-Whitney U" in text.splitlines()[2]
    assert "slower: step, rl.grpo.policy_update" in text
    # The other way round it is faster, and nothing is slower.
    assert spanspec_cli("diff", str(cand), str(base)).returncode == 0


def test_a_real_change_below_the_threshold_is_the_same(tmp_path):
    base = write_run(tmp_path / "base", _noisy(1.0, 20, 1, 0.005), seed=1)
    cand = write_run(tmp_path / "cand", _noisy(1.03, 20, 2, 0.005), seed=2)
    assert spanspec_cli("diff", str(base), str(cand)).returncode == 0  # 3% < 5%
    proc = spanspec_cli("diff", str(base), str(cand), "--threshold", "1")
    assert proc.returncode == 1 and "slower: step, rl.grpo.policy_update" in proc.stdout


def test_a_short_phase_changing_less_than_the_noise_floor_is_the_same(tmp_path):
    # The reward phase doubles from 4 ms to 8 ms in a 1.1 s step: significant (every candidate
    # step is slower), but 0.4 % of the step, below the 1 % floor a busy machine moves it by.
    base = write_run(tmp_path / "base", _noisy(1.0, 12, 1), seed=1, reward_s=0.004)
    cand = write_run(tmp_path / "cand", _noisy(1.0, 12, 2), seed=2, reward_s=0.008)
    proc = spanspec_cli("diff", str(base), str(cand), "--format", "json")
    assert proc.returncode == 0, proc.stdout
    out = json.loads(proc.stdout)
    reward = next(r for r in out["rows"] if r["name"] == "rl.grpo.reward")
    assert reward["verdict"] == "same" and reward["p"] < 0.05 and reward["ratio"] > 1.9
    assert out["method"]["min_share"] == 0.01
    assert 0.0105 < out["method"]["floor_seconds"] < 0.0115  # 1 % of the 1.104 s median step
    assert "1% of the baseline's median step" in spanspec_cli("diff", str(base), str(cand)).stdout
    # Without the floor relative to the step, the 4 ms change (above --min-seconds) is called.
    proc = spanspec_cli("diff", str(base), str(cand), "--min-share", "0")
    assert proc.returncode == 1 and "slower: rl.grpo.reward" in proc.stdout
    bad = spanspec_cli("diff", str(base), str(cand), "--min-share", "101")
    assert bad.returncode == 2 and "--min-share" in bad.stderr and "Traceback" not in bad.stderr


def test_runs_of_the_same_distribution_are_the_same(tmp_path):
    base = write_run(tmp_path / "base", _noisy(1.0, 12, 1, 0.2), seed=1)
    cand = write_run(tmp_path / "cand", _noisy(1.0, 12, 2, 0.2), seed=2)
    proc = spanspec_cli("diff", str(base), str(cand))
    assert proc.returncode == 0, proc.stdout
    assert "no phase is slower" in proc.stdout


def _bad(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    base = write_run(tmp_path / "base", _noisy(1.0, 5, 1), seed=1)
    _bad(spanspec_cli("diff", str(base), str(tmp_path / "missing")), "missing", "no such file")
    no_steps = tmp_path / "nosteps"
    write_traces(no_steps, grpo_steps(2), groups="default")
    _bad(spanspec_cli("diff", str(base), str(no_steps)), "nosteps", "no rl.{algorithm}.step")
    other = write_run(tmp_path / "ppo", _noisy(1.0, 5, 1), algorithm="ppo", seed=3)
    _bad(spanspec_cli("diff", str(base), str(other)), "different step spans", "--force")
    forced = spanspec_cli("diff", str(base), str(other), "--force")
    assert forced.returncode in (0, 1) and "Traceback" not in forced.stderr
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "traces.jsonl").write_bytes(b"\x00\xff not json\n{}\n")
    _bad(spanspec_cli("diff", str(base), str(garbage)), "traces.jsonl:1:", "not JSON")
    folder = tmp_path / "folder"
    (folder / "traces.jsonl").mkdir(parents=True)
    _bad(spanspec_cli("diff", str(folder), str(base)), "file.no_traces")
    _bad(spanspec_cli("diff", str(base), str(base), "--warmup", "5"), "--warmup")
    _bad(spanspec_cli("diff", str(base), str(base), "--threshold", "-1"), "--threshold")


def test_the_steps_of_another_algorithm_are_steps_too(tmp_path):
    # Every expansion of the conventions' step span template is a step (rl.ppo.step here).
    path = write_traces(tmp_path, grpo_steps(3), groups="per_step")

    def rename(request: dict) -> None:
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["name"] = s["name"].replace("rl.grpo.", "rl.ppo.")

    rewrite_lines(path, rename)
    assert step_breakdown(path).steps == 3


def test_the_step_reader_holds_only_the_steps_in_flight(tmp_path):
    from spanspec.traces.otlp_json import TraceStream
    from spanspec.traces.steps import StepCollector

    path = write_run(tmp_path / "long", _noisy(1.0, 300, 1), seed=1) / "traces.jsonl"
    collector = StepCollector(spanspec.load())
    closed = 0
    for span in TraceStream(path).merged():
        closed += len(collector.add(span))
    closed += len(collector.finish())
    assert closed == 300 and collector.spans == 1200
    assert collector.held_peak <= 8  # a step and a half of 4 spans, not the file


def test_a_run_in_several_files_reads_as_one(tmp_path):
    # The driver's spans in one file, the worker's in another (one file per process).
    path = write_traces(tmp_path / "one", grpo_steps(3), groups="per_step")
    split_worker_spans(path, {"rl.worker.group": "policy", "rl.worker.rank": 0})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    driver, worker = tmp_path / "run" / "driver", tmp_path / "run" / "worker"
    driver.mkdir(parents=True)
    worker.mkdir(parents=True)
    for folder, index in ((driver, 0), (worker, 1)):
        (folder / "traces.jsonl").write_text(
            "".join(
                json.dumps({"resourceSpans": [r["resourceSpans"][index]]}) + "\n" for r in lines
            )
        )
    spec = spanspec.load()
    assert str(step_breakdown(tmp_path / "run", spec)) == str(
        compute_breakdown(read_spans(path), spec)
    )
    proc = spanspec_cli("diff", str(tmp_path / "run"), str(tmp_path / "one"), "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    assert "rl.worker.generate" in proc.stdout
