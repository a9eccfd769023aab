"""``spanspec diff`` on real GRPO runs made here: the tiny config with ``policy.train_passes``
doubled against its baseline is called slower in ``rl.grpo.policy_update`` (exit 1) and in no
phase it does not touch; a run against itself is the same (exit 0). The two runs are made once for
the module (about 20 s each on two cores).

Whether two separate runs of one config are called the same depends on the machine's load
between them, not on ``spanspec diff``: that rate is measured by ``bench/diff_false_positives.py``
(docs/observability/reading_a_run.md has its figures), not asserted here."""

from __future__ import annotations

import json

import pytest

from tests.traces import run_example, spanspec_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 6  # the first is left out (--warmup 1): five per-step samples a run
UNCHANGED = ("rl.grpo.data_processing", "rl.grpo.reward", "rl.grpo.advantage")
# Separate runs drift with the machine's load (another job on the two cores can make every phase
# 2-4x slower): the unchanged phases are judged at a threshold well above that noise, the doubled
# policy update (about 2x) well beyond it.
NOISE_THRESHOLD = "25"


def _run(folder, *overrides: str) -> None:
    run_example(
        "run_grpo.py",
        f"logger.log_dir={folder}",
        "logger.tqdm=false",
        f"grpo.max_steps={STEPS}",
        "grpo.num_prompts_per_step=8",
        "grpo.val_period=1000",
        "grpo.val_at_start=false",
        "checkpointing.enabled=false",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
        *overrides,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff_runs")
    _run(root / "baseline")
    _run(root / "passes", "policy.train_passes=4")  # the tiny config's 2, doubled
    return root


def _diff(*args: str) -> tuple[int, dict]:
    proc = spanspec_cli("diff", *args, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    _same_conditions(out)
    return proc.returncode, out


def _same_conditions(out: dict) -> None:
    """Skip when the machine's load changed between the two runs: generation, which no run here
    changes, is the control. On a shared two-core machine another job can make every phase of a
    run 2-7x slower (or faster), and no test over step times can tell that from the change."""
    control = next(r for r in out["rows"] if r["name"] == "rl.grpo.generation")
    if not 2 / 3 <= control["ratio"] <= 3 / 2:
        pytest.skip(
            f"the machine's load changed between the runs: rl.grpo.generation, which did not "
            f"change, took {control['ratio']:.2f}x the baseline's median"
        )


def test_doubled_train_passes_make_the_policy_update_slower(runs):
    code, out = _diff(str(runs / "baseline"), str(runs / "passes"), "--threshold", NOISE_THRESHOLD)
    verdicts = {r["name"]: r for r in out["rows"] if r["kind"] == "phase"}
    update = verdicts["rl.grpo.policy_update"]
    assert update["verdict"] == "slower", update
    assert update["ratio"] > 1.3 and update["p"] < 0.05
    assert code == 1 and "rl.grpo.policy_update" in out["slower"]
    for phase in UNCHANGED:
        assert verdicts[phase]["verdict"] != "slower", verdicts[phase]
    assert out["baseline"]["steps"] == out["candidate"]["steps"] == STEPS
    assert out["method"]["test"] == "mann-whitney-u"
    # Metrics both runs recorded are shown side by side; the telemetry cost too.
    assert {"rl.reward.mean", "rl.policy.loss"} <= {m["name"] for m in out["metrics"]}
    assert {t["name"] for t in out["telemetry"]} >= {"spans per step", "trace bytes per step"}
    text = spanspec_cli("diff", str(runs / "baseline"), str(runs / "passes")).stdout
    assert "Mann-Whitney U" in text and "slower: " in text and "rl.grpo.policy_update" in text


def test_a_run_against_itself_is_the_same(runs):
    code, out = _diff(str(runs / "baseline"), str(runs / "baseline"))
    assert code == 0 and out["slower"] == []
    phases = [r for r in out["rows"] if r["kind"] == "phase"]
    assert {r["name"] for r in phases} >= {"rl.grpo.rollout", "rl.grpo.policy_update"}
    assert all(r["verdict"] == "same" and r["ratio"] == 1.0 for r in phases), phases


def test_a_run_against_a_run_of_another_algorithm_is_refused(runs, tmp_path):
    # Same run, its step spans renamed as another program's: exit 2 unless --force.
    src = runs / "baseline" / "telemetry" / "traces.jsonl"
    other = tmp_path / "other" / "telemetry"
    other.mkdir(parents=True)
    (other / "traces.jsonl").write_text(src.read_text().replace('"rl.grpo.step"', '"rl.ppo.step"'))
    proc = spanspec_cli("diff", str(runs / "baseline"), str(tmp_path / "other"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "different step spans" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert spanspec_cli("diff", str(runs / "baseline"), str(tmp_path / "other"), "--force")\
        .returncode in (0, 1)  # fmt: skip
