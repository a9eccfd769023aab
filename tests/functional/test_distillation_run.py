"""examples/run_distillation.py as a user runs it on a fresh machine (no teacher checkpoint, real
Ray, file exporter, ``span_groups=all``): it first trains its teacher with GRPO as a job of its
own, then distils; judged from both jobs' trace files, the metrics file and ``live-check``."""

import json

import pytest

from tests.readme_figures import check_ci_figures
from tests.traces import ancestors, live_check, read_spans, run_example, step_subtrees

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 3
PHASES = {
    "rl.distillation.data_processing",
    "rl.distillation.rollout",
    "rl.distillation.generation",
    "rl.distillation.teacher_logprob",
    "rl.distillation.logprob",
    "rl.distillation.policy_update",
    "rl.distillation.weight_sync",
}


# The README quotes this command and what it prints (tests/readme_figures.py).
ARGS = [
    "logger.tqdm=false",
    "teacher_training.max_steps=2",
    "teacher_training.num_prompts_per_step=4",
    "teacher_training.num_generations_per_prompt=2",
    "teacher_training.val_period=0",
    "teacher_training.val_at_start=false",
    f"distillation.max_steps={STEPS}",
    "distillation.num_prompts_per_step=8",
    "distillation.val_period=2",
    "checkpointing.save_period=2",
    "telemetry.exporter=file",
    "telemetry.span_groups=all",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("distillation_run")
    proc = run_example("run_distillation.py", f"logger.log_dir={log_dir}", *ARGS, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    spans = read_spans(log_dir / "telemetry" / "traces.jsonl")
    teacher_spans = read_spans(log_dir / "teacher" / "telemetry" / "traces.jsonl")
    return log_dir, proc.stdout, spans, teacher_spans


def test_the_teacher_is_trained_first_by_grpo_as_a_job_of_its_own_and_said_so(run):
    log_dir, stdout, spans, teacher_spans = run
    assert "no teacher.checkpoint given, so GRPO trains the teacher first (2 steps" in stdout
    assert f"distilling from {log_dir / 'teacher' / 'checkpoints' / 'step_2'}" in stdout
    assert stdout.index("GRPO trains the teacher") < stdout.index("validation accuracy")
    (grpo_job,) = [s for s in teacher_spans if s["name"] == "rl.grpo.job"]
    assert grpo_job["attrs"]["rl.algorithm"] == "grpo" and grpo_job["attrs"]["rl.max_steps"] == 2
    assert len([s for s in teacher_spans if s["name"] == "rl.grpo.step"]) == 2
    assert not any(s["name"].startswith("rl.grpo.") for s in spans)  # its own trace files
    (job,) = [s for s in spans if s["name"] == "rl.distillation.job"]
    assert job["resource"]["rl.run_id"] != grpo_job["resource"]["rl.run_id"]  # its own run id


def test_each_step_holds_every_distillation_phase(run):
    _, _, spans, _ = run
    traces = step_subtrees(spans, "rl.distillation.step")
    assert [step["attrs"]["rl.iteration"] for step, _ in traces] == list(range(1, STEPS + 1))
    by_id = {s["spanId"]: s for s in spans}
    for step, names in traces:
        phases = {n for n in names if n.startswith("rl.distillation.")}
        assert phases - {"rl.distillation.evaluate", "rl.distillation.checkpoint"} == PHASES
        for name in PHASES:
            (span,) = names[name]
            assert span["attrs"]["rl.iteration"] == step["attrs"]["rl.iteration"]
            parent = by_id[span["parentSpanId"]]["name"]
            expected = "rl.distillation.rollout" if name.endswith(".generation") else None
            assert parent == (expected or "rl.distillation.step"), name


def test_teacher_worker_spans_join_the_step_trace_from_their_own_process(run):
    _, _, spans, _ = run
    by_id = {s["spanId"]: s for s in spans}
    teacher = [s for s in spans if s["resource"]["rl.worker.group"] == "teacher"]
    pids = {
        g: {s["resource"]["process.pid"] for s in spans if s["resource"]["rl.worker.group"] == g}
        for g in ("driver", "policy", "teacher")
    }
    assert all(len(p) == 1 for p in pids.values()) and len(set.union(*pids.values())) == 3
    assert {s["name"] for s in teacher} == {"rl.worker.logprob"}
    for s in teacher:
        assert ancestors(s, by_id)[0]["name"] == "rl.distillation.teacher_logprob"
        assert s["attrs"]["rl.worker.group"] == "teacher"
    for step, names in step_subtrees(spans, "rl.distillation.step"):
        mine = [
            s for s in names["rl.worker.logprob"] if s["resource"]["rl.worker.group"] == "teacher"
        ]
        assert len(mine) == 1, step["attrs"]["rl.iteration"]
        student = [
            s for s in names["rl.worker.logprob"] if s["resource"]["rl.worker.group"] == "policy"
        ]
        assert ancestors(student[0], by_id)[0]["name"] == "rl.distillation.logprob"


def test_metrics_reach_the_file_and_opentelemetry(run):
    log_dir, stdout, _, _ = run
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/kl_to_teacher" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["train/kl_to_teacher"] > 0 and r["train/loss"] > 0 for r in train)
    val = [r for r in rows if "validation/accuracy" in r]
    assert [r["step"] for r in val] == [0, 2] and "validation/teacher_accuracy" in val[0]
    otel = (log_dir / "telemetry" / "metrics.jsonl").read_text()
    for name in ("rl.teacher.kl", "rl.policy.loss", "rl.validation.accuracy"):
        assert f'"{name}"' in otel, name
    assert "mean kl_to_teacher: first" in stdout and "rl.distillation.teacher_logprob" in stdout
    assert sorted(p.name for p in (log_dir / "checkpoints").iterdir()) == ["step_2", "step_3"]


def test_both_jobs_traces_pass_live_check(run):
    log_dir, _, _, _ = run
    summary = live_check(log_dir / "telemetry")
    assert summary["ok"] and summary["violations"] == 0
    assert summary["spans_checked"] == summary["spans"] > 0
    coverage = {c["group"]: c for c in summary["coverage"]}
    assert "rl.distillation.teacher_logprob" in coverage["logprob"]["seen"]
    teacher = live_check(log_dir / "teacher" / "telemetry")
    assert teacher["ok"] and teacher["violations"] == 0 and teacher["spans"] > 0


def test_the_readme_quotes_what_this_run_prints(run):
    check_ci_figures("run_distillation.py", ARGS, run[1])
