"""examples/run_sft.py, run_dpo.py and run_rm.py as a user runs them: a subprocess with the file
exporter and every span group on, judged from the trace file it leaves (the job span, each
phase of a step under it, worker spans under the driver phase that asked, in the same trace but
another process) and from ``spanspec live-check`` on the run's telemetry folder."""

import json

import pytest

from tests.traces import live_check, read_spans, run_example, step_traces

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 3
# The driver phases directly under a step that validates and checkpoints (the second one).
PHASES = {
    "sft": {"data_processing", "policy_update", "evaluate", "checkpoint"},
    "dpo": {"data_processing", "reference_policy", "policy_update", "evaluate", "checkpoint"},
    "rm": {"data_processing", "policy_update", "evaluate", "checkpoint"},
}
# worker span -> the driver phases it may sit under, per algorithm
WORKER_PARENTS = {
    "sft": {
        "rl.worker.train_microbatch": {"policy_update"},
        "rl.worker.optimizer_step": {"policy_update"},
        "rl.worker.update_weights": {"evaluate"},
        "rl.worker.generate": {"evaluate"},
    },
    "dpo": {
        "rl.worker.train_microbatch": {"policy_update"},
        "rl.worker.optimizer_step": {"policy_update"},
        "rl.worker.logprob": {"reference_policy", "evaluate"},
    },
    "rm": {
        "rl.worker.train_microbatch": {"policy_update"},
        "rl.worker.optimizer_step": {"policy_update"},
        "rl.worker.logprob": {"evaluate"},
    },
}


@pytest.fixture(scope="module", params=sorted(PHASES))
def run(request, tmp_path_factory):
    algo = request.param
    log_dir = tmp_path_factory.mktemp(f"{algo}_run")
    proc = run_example(
        f"run_{algo}.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"{algo}.max_steps={STEPS}",
        f"{algo}.batch_size=16",
        f"{algo}.val_period=2",
        "checkpointing.save_period=2",
        "telemetry.exporter=file",
        "telemetry.span_groups=all",
    )
    return algo, log_dir, proc.stdout, read_spans(log_dir / "telemetry" / "traces.jsonl")


def test_the_job_span_holds_model_init_and_every_step(run):
    algo, _, _, spans = run
    by_id = {s["spanId"]: s for s in spans}
    (job,) = [s for s in spans if s["name"] == f"rl.{algo}.job"]
    assert not job.get("parentSpanId")
    assert job["attrs"]["rl.algorithm"] == algo and job["attrs"]["rl.max_steps"] == STEPS
    (init,) = [s for s in spans if s["name"] == f"rl.{algo}.model_init"]
    steps = [s for s in spans if s["name"] == f"rl.{algo}.step"]
    assert sorted(s["attrs"]["rl.iteration"] for s in steps) == list(range(1, STEPS + 1))
    for s in [init, *steps]:
        assert by_id[s["parentSpanId"]] is job and s["traceId"] == job["traceId"]
    # the baseline validation runs before the first step, straight under the job
    start = [
        s
        for s in spans
        if s["name"] == f"rl.{algo}.evaluate" and s["parentSpanId"] == job["spanId"]
    ]
    assert [s["attrs"]["rl.iteration"] for s in start] == [0]


def test_a_step_holds_every_phase_once(run):
    algo, _, _, spans = run
    traces = step_traces(spans, f"rl.{algo}.step")
    assert [step["attrs"]["rl.iteration"] for step, _ in traces] == list(range(1, STEPS + 1))
    for step, _ in traces:
        children = [s for s in spans if s.get("parentSpanId") == step["spanId"]]
        names = sorted(s["name"].removeprefix(f"rl.{algo}.") for s in children)
        # steps 2 and 3 checkpoint; step 2 validates
        expected = {"data_processing", "policy_update"} | (
            {"reference_policy"} if algo == "dpo" else set()
        )
        if step["attrs"]["rl.iteration"] == 2:
            expected = PHASES[algo]
        elif step["attrs"]["rl.iteration"] == 3:
            expected = expected | {"checkpoint"}
        assert names == sorted(expected), (step["attrs"], names)
        for s in children:
            assert s["attrs"]["rl.iteration"] == step["attrs"]["rl.iteration"]
        update = next(s for s in children if s["name"] == f"rl.{algo}.policy_update")
        assert (
            update["attrs"]["rl.batch_size"] == 16 and update["attrs"]["rl.num_micro_batches"] >= 1
        )


def test_worker_spans_sit_under_the_asking_phase_in_another_process(run):
    algo, _, _, spans = run
    by_id = {s["spanId"]: s for s in spans}
    (job,) = [s for s in spans if s["name"] == f"rl.{algo}.job"]
    driver_pid = job["resource"]["process.pid"]
    workers = [s for s in spans if s["name"].startswith("rl.worker.")]
    assert {s["name"] for s in workers} == set(WORKER_PARENTS[algo])
    for w in workers:
        parent = by_id[w["parentSpanId"]]
        assert parent["name"].removeprefix(f"rl.{algo}.") in WORKER_PARENTS[algo][w["name"]]
        assert w["traceId"] == parent["traceId"] == job["traceId"]
        assert w["resource"]["process.pid"] != driver_pid
        assert w["resource"]["rl.worker.group"] in ("policy", "generation")
    if algo == "dpo":  # the frozen reference answers the reference phase
        ref = [w for w in workers if by_id[w["parentSpanId"]]["name"] == "rl.dpo.reference_policy"]
        assert len(ref) == STEPS and {w["attrs"]["rl.worker.group"] for w in ref} == {"reference"}
        assert all(w["attrs"]["rl.batch_size"] == 32 for w in ref)  # both sides of 16 pairs


def test_metrics_reach_the_file_and_opentelemetry(run):
    algo, log_dir, stdout, _ = run
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["train/tokens_per_sec"] > 0 and r["train/lr"] > 0 for r in train)
    assert [r["step"] for r in rows if "validation/accuracy" in r] == [0, 2]
    assert len([r for r in rows if f"timing/rl.{algo}.step" in r]) == STEPS
    otel = (log_dir / "telemetry" / "metrics.jsonl").read_text()
    names = ["rl.policy.loss", "rl.validation.accuracy", "rl.grad_norm", "rl.step.duration"]
    if algo != "sft":
        names += ["rl.preference.accuracy", "rl.preference.margin", "rl.validation.margin"]
    for name in names:
        assert f'"{name}"' in otel, name
    assert "where the step time went" in stdout and f"rl.{algo}.policy_update" in stdout


def test_emitted_traces_pass_live_check(run):
    algo, log_dir, _, _ = run
    summary = live_check(log_dir / "telemetry")
    coverage = {c["group"]: c for c in summary["coverage"]}
    for phase in PHASES[algo] | {"job", "step", "model_init"}:
        assert f"rl.{algo}.{phase}" in coverage[phase]["seen"], phase
