"""examples/run_grpo.py as a user runs it: a subprocess with the file exporter, judged from the
trace file it leaves (one root trace per step, every phase inside, worker spans in the step's
trace) and from its metrics file."""

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.traces import live_check, read_spans, run_example, spanspec_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 4
PHASES = [
    "rl.grpo.data_processing",
    "rl.grpo.rollout",
    "rl.grpo.generation",
    "rl.grpo.reward",
    "rl.grpo.logprob",
    "rl.grpo.reference_policy",
    "rl.grpo.advantage",
    "rl.grpo.policy_update",
    "rl.grpo.weight_sync",
]
# phase -> the driver span it must sit under
PARENT = {"rl.grpo.generation": "rl.grpo.rollout", "rl.grpo.reward": "rl.grpo.rollout"}
# worker span -> the driver span that asked for it
WORKER_PARENT = {
    "rl.worker.generate": "rl.grpo.generation",
    "rl.worker.train_microbatch": "rl.grpo.policy_update",
    "rl.worker.optimizer_step": "rl.grpo.policy_update",
    "rl.worker.update_weights": "rl.grpo.weight_sync",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("grpo_run")
    proc = run_example(
        "run_grpo.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"grpo.max_steps={STEPS}",
        "grpo.num_prompts_per_step=8",
        "grpo.val_period=2",
        "checkpointing.save_period=3",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
    )
    # stdout and stderr as the terminal shows them: what a user reads
    return log_dir, proc.stdout + proc.stderr, read_spans(log_dir / "telemetry" / "traces.jsonl")


def test_each_step_is_a_root_trace_holding_every_phase(run):
    _, _, spans = run
    steps = sorted(
        (s for s in spans if s["name"] == "rl.grpo.step"), key=lambda s: s["attrs"]["rl.iteration"]
    )
    assert [s["attrs"]["rl.iteration"] for s in steps] == list(range(1, STEPS + 1))
    assert len({s["traceId"] for s in steps}) == STEPS
    for step in steps:
        assert not step.get("parentSpanId"), "under per_step a step is the root of its trace"
        trace = [s for s in spans if s["traceId"] == step["traceId"]]
        by_id = {s["spanId"]: s for s in trace}
        names = defaultdict(list)
        for s in trace:
            names[s["name"]].append(s)
        for phase in PHASES:
            assert len(names[phase]) == 1, (phase, sorted(names))
            span = names[phase][0]
            assert span["attrs"]["rl.iteration"] == step["attrs"]["rl.iteration"]
            parent = by_id[span["parentSpanId"]]["name"]
            assert parent == PARENT.get(phase, "rl.grpo.step"), (phase, parent)
        assert names["rl.grpo.data_processing"][0]["attrs"]["rl.num_generations_per_prompt"] == 8
        assert names["rl.grpo.data_processing"][0]["attrs"]["rl.batch_size"] == 64
        assert names["rl.grpo.reward"][0]["attrs"]["rl.reward.mean"] > 0
        assert names["rl.grpo.generation"][0]["attrs"]["rl.num_tokens"] > 0
        assert names["rl.grpo.weight_sync"][0]["attrs"]["rl.weight_sync.num_bytes"] > 1_000_000


def test_worker_spans_share_the_step_trace_and_hang_under_the_asking_span(run):
    _, _, spans = run
    by_id = {s["spanId"]: s for s in spans}
    steps = {s["traceId"]: s for s in spans if s["name"] == "rl.grpo.step"}
    workers = [s for s in spans if s["name"].startswith("rl.worker.")]
    assert {s["name"] for s in workers} >= {*WORKER_PARENT, "rl.worker.logprob"}
    for w in workers:
        parent = by_id[w["parentSpanId"]]
        assert w["traceId"] == parent["traceId"]
        assert w["resource"]["rl.worker.group"] in ("policy", "generation")  # another process
        if w["name"] == "rl.worker.logprob":
            assert parent["name"] in ("rl.grpo.logprob", "rl.grpo.reference_policy")
            assert (
                w["attrs"]["rl.worker.group"]
                == {"rl.grpo.logprob": "policy", "rl.grpo.reference_policy": "reference"}[
                    parent["name"]
                ]
            )
            assert w["attrs"]["rl.batch_size"] == 64
        elif w["name"] == "rl.worker.generate":
            assert parent["name"] in ("rl.grpo.generation", "rl.grpo.evaluate")
            assert w["attrs"]["gen_ai.provider.name"] == "torch"
        else:
            assert parent["name"] == WORKER_PARENT[w["name"]]
    for trace_id in steps:
        in_step = [w for w in workers if w["traceId"] == trace_id]
        micro = sorted(
            w["attrs"]["rl.micro_batch"]
            for w in in_step
            if w["name"] == "rl.worker.train_microbatch"
        )
        assert (
            micro == list(range(len(micro))) and micro
        )  # every micro-batch, numbered within the step


def test_checkpoint_and_validation_spans_on_their_intervals(run):
    log_dir, _, spans = run
    evaluate = sorted(s["attrs"]["rl.iteration"] for s in spans if s["name"] == "rl.grpo.evaluate")
    assert evaluate == [0, 2, 4]  # before training, then after steps 2 and 4
    start = next(s for s in spans if s["name"] == "rl.grpo.evaluate" and not s.get("parentSpanId"))
    assert "rl.eval.accuracy" in start["attrs"] and start["attrs"]["rl.eval.num_samples"] > 0
    ckpt = sorted(
        (s["attrs"]["rl.iteration"], s["attrs"]["rl.checkpoint.step"])
        for s in spans
        if s["name"] == "rl.grpo.checkpoint"
    )
    assert ckpt == [(3, 3), (4, 4)]  # every 3 steps, and after the last
    for s in spans:
        if s["name"] == "rl.grpo.checkpoint":
            assert Path(s["attrs"]["rl.checkpoint.path"]).is_dir()
    assert sorted(p.name for p in (log_dir / "checkpoints").iterdir()) == ["step_3", "step_4"]


def test_one_step_number_everywhere(run):
    # Steps are numbered from 1 in every output, 0 being "before the first step": the console's
    # "step N: validation" line, metrics.jsonl's "step", the rl.iteration of the step span and of
    # the evaluate span that line reports, the checkpoint folders and `spanspec view --step N`.
    log_dir, stdout, spans = run
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    by_id = {s["spanId"]: s for s in spans}
    steps = sorted(s["attrs"]["rl.iteration"] for s in spans if s["name"] == "rl.grpo.step")
    assert steps == [r["step"] for r in rows if "train/loss" in r] == list(range(1, STEPS + 1))
    console = [int(n) for n in re.findall(r"^step (\d+): validation accuracy", stdout, re.M)]
    logged = [r["step"] for r in rows if "validation/accuracy" in r]
    evaluate = {}
    for s in spans:
        if s["name"] == "rl.grpo.evaluate":
            parent = by_id.get(s.get("parentSpanId", ""))
            # after step N, inside step N's span: the evaluate span carries N too
            assert parent is None or parent["attrs"]["rl.iteration"] == s["attrs"]["rl.iteration"]
            evaluate[s["attrs"]["rl.iteration"]] = s["attrs"]["rl.eval.accuracy"]
    assert console == logged == sorted(evaluate) == [0, 2, 4]
    for r in rows:
        if "validation/accuracy" in r:
            assert r["validation/accuracy"] == pytest.approx(evaluate[r["step"]])
    shown = ", ".join(f"step {n} {evaluate[n]:.3f}" for n in (0, 2, 4))
    assert f"validation accuracy: {shown}" in stdout  # the run's summary line
    ckpt = sorted(s["attrs"]["rl.iteration"] for s in spans if s["name"] == "rl.grpo.checkpoint")
    assert [f"step_{n}" for n in ckpt] == sorted(
        p.name for p in (log_dir / "checkpoints").iterdir()
    )
    view = spanspec_cli("view", str(log_dir / "telemetry"), "--step", "2", "--width", "10")
    assert view.returncode == 0, view.stderr[-3000:]
    assert "rl.grpo.step (rl.iteration=2)" in view.stdout  # the header names the step
    assert "rl.grpo.evaluate" in view.stdout  # step 2's trace holds the validation after it


def test_metrics_file_holds_the_training_signals(run):
    log_dir, stdout, spans = run
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    for r in train:
        for key in (
            "train/reward_mean",
            "train/loss",
            "train/kl",
            "train/grad_norm",
            "train/lr",
            "train/tokens_per_sec",
            "train/num_tokens",
        ):
            assert isinstance(r[key], int | float), key
        assert r["train/lr"] > 0 and r["train/tokens_per_sec"] > 0
    timing = [r for r in rows if "timing/rl.grpo.step" in r]
    assert len(timing) == STEPS and all("timing/rl.grpo.policy_update" in r for r in timing)
    assert [r["step"] for r in rows if "validation/accuracy" in r] == [0, 2, 4]
    # the run ends by saying where the step time went and where the traces are
    assert "where the step time went" in stdout and "rl.grpo.policy_update" in stdout
    assert str(log_dir / "telemetry" / "traces.jsonl") in stdout
    # Ray's token-auth notice for the local cluster (nothing to act on) is not shown
    assert "Token authentication" not in stdout
    # the console names the run the traces carry, before the first step, with its groups
    (run_id,) = {s["resource"]["rl.run_id"] for s in spans}
    assert f"run {run_id}: span groups per_step, export single_rank" in stdout
    assert stdout.index(f"run {run_id}:") < stdout.index("where the step time went")


def test_logger_metrics_reach_opentelemetry(run):
    log_dir, _, _ = run
    text = (log_dir / "telemetry" / "metrics.jsonl").read_text()
    for name in (
        "rl.reward.mean",
        "rl.policy.loss",
        "rl.grad_norm",
        "rl.learning_rate",
        "rl.throughput",
        "rl.step.duration",
        "gen_ai.client.token.usage",
    ):
        assert f'"{name}"' in text, name


def test_emitted_traces_pass_live_check(run):
    # The run's own trace file, held against the registry as a user would: every span declared,
    # required attributes present and typed, nothing from a group per_step leaves off.
    log_dir, _, _ = run
    summary = live_check(log_dir / "telemetry")
    assert summary["groups_source"] == "resource attribute spanspec.groups"
    coverage = {c["group"]: c for c in summary["coverage"]}
    for phase in [*PHASES, "rl.grpo.step", "rl.grpo.evaluate", "rl.grpo.checkpoint"]:
        group = next(g for g, c in coverage.items() if phase in c["declared"])
        assert coverage[group]["state"] == "on" and phase in coverage[group]["seen"], phase
    assert coverage["job"]["state"] == "off" and coverage["job"]["emitted"] == 0
    # Full coverage of the phases a GRPO run can emit (another algorithm's literal spans, such
    # as distillation's teacher log-probs, are not counted missing); the table printed once.
    done = spanspec_cli(
        "live-check", str(log_dir / "telemetry"), *("--require-coverage", "logprob"),
        *("--require-coverage", "policy_update"), *("--require-coverage", "weight_sync"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count("coverage (") == 1 and "live.coverage" not in done.stdout


def test_the_run_folder_gives_a_report_and_a_perfetto_trace(run, tmp_path):
    # What a user opens after the run: `spanspec report` on the run folder (the page's data is
    # the run's steps and processes) and `spanspec view --format chrome` for Perfetto.
    log_dir, _, spans = run
    page = tmp_path / "report.html"
    proc = spanspec_cli("report", str(log_dir), "-o", str(page))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{STEPS} steps, {len(spans)} spans, 3 processes" in proc.stdout
    data = json.loads(page.read_text().split('id="report-data">', 1)[1].split("</script>", 1)[0])
    assert data["lanes"] == ["driver", "generation 0", "policy 0"]
    assert [s["iteration"] for s in data["steps"]] == list(range(1, STEPS + 1))
    assert data["curve_step_offset"] == 0  # metrics.jsonl's steps are the step spans' numbers
    steps = {s["attrs"]["rl.iteration"]: s for s in spans if s["name"] == "rl.grpo.step"}
    assert steps[1]["attrs"]["input.value"] == "grpo step 1"
    assert steps[1]["attrs"]["output.value"].startswith("reward ")
    trace = tmp_path / "trace.json"
    proc = spanspec_cli("view", "--format", "chrome", "-o", str(trace), str(log_dir / "telemetry"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(spans)
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"driver", "generation 0", "policy 0"}
