"""nemo_rl's telemetry in Hugging Face TRL runs, as a user runs them: ``examples/trl/*.py`` with
the callback, an unmodified script under the launcher, and the readers on what they wrote.

Each run is made once for the module (a few seconds each on the tiny model folder): TRL GRPO
with the callback, the same under ``python -m nemo_rl.integrations.trl.run`` without it, the same
with telemetry off, DPO, SFT, a nemo_rl GRPO run for ``spanspec diff`` to compare with, and TRL
GRPO on two processes under ``accelerate launch`` (CPU, gloo), one of them slowed.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.otlp_receiver import OtlpReceiver
from tests.traces import (
    ROOT,
    ancestors,
    clean_env,
    live_check,
    metric_points,
    read_spans,
    run_example,
    spanspec_cli,
    step_subtrees,
)

pytest.importorskip("trl")

GRPO_ARGS = ("--max-steps", "3", "--save-steps", "3", "--eval-steps", "3", "--seed", "0")
BATCH = 4  # examples/trl/grpo.py's completions per step


def _run(
    *command: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    on = {"NEMO_RL_OTEL_SPAN_GROUPS": "all", "NEMO_RL_OTEL_EXPORTER": "file"}
    proc = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=clean_env(**{**on, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
    return proc


class Run:
    """One finished run: its folder, console and what TRL logged."""

    def __init__(self, folder: Path, proc: subprocess.CompletedProcess) -> None:
        self.folder, self.proc = folder, proc
        self.telemetry = folder / "telemetry"
        self.log = json.loads((folder / "log_history.json").read_text())

    @property
    def spans(self) -> list[dict]:
        return read_spans(self.telemetry / "traces.jsonl")

    def logged(self, key: str) -> list[float]:
        """``key`` of each training step's log line, in step order."""
        return [row[key] for row in self.log if key in row and "train_runtime" not in row]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny_hf")
    _run("scripts/make_tiny_hf.py", str(out))
    return out / "tiny-math-llama"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("trl_runs")


def _example(
    runs: Path, tiny: Path, name: str, command: tuple[str, ...], *args: str, **env: str
) -> Run:
    folder = runs / name
    proc = _run(*command, "--model", str(tiny), "--output-dir", str(folder), *args, env=env)
    return Run(folder, proc)


@pytest.fixture(scope="module")
def grpo(runs, tiny) -> Run:
    return _example(runs, tiny, "grpo", ("examples/trl/grpo.py",), *GRPO_ARGS)


@pytest.fixture(scope="module")
def launched(runs, tiny) -> Run:
    # The same script, without the callback: the launcher adds it.
    launcher = ("-m", "nemo_rl.integrations.trl.run", "examples/trl/grpo.py")
    return _example(runs, tiny, "launched", launcher, "--no-telemetry-callback", *GRPO_ARGS)


@pytest.fixture(scope="module")
def grpo_off(runs, tiny) -> Run:
    args = (*GRPO_ARGS,)
    return _example(
        runs, tiny, "off", ("examples/trl/grpo.py",), *args, NEMO_RL_OTEL_ENABLED="false"
    )


@pytest.fixture(scope="module")
def dpo(runs, tiny) -> Run:
    return _example(
        runs, tiny, "dpo", ("examples/trl/dpo.py",), "--max-steps", "2", "--eval-steps", "2"
    )


@pytest.fixture(scope="module")
def sft(runs, tiny) -> Run:
    return _example(runs, tiny, "sft", ("examples/trl/sft.py",), "--max-steps", "2")


def _training(spans: list[dict], by_id: dict[str, dict]) -> list[dict]:
    """The spans of ``spans`` not under an evaluation (GRPO's evaluation rolls out too)."""
    return [s for s in spans if "rl.grpo.evaluate" not in {a["name"] for a in ancestors(s, by_id)}]


# -- GRPO ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["grpo", "launched"])
def test_grpo_steps_hold_generation_reward_and_update(which, request):
    run: Run = request.getfixturevalue(which)
    spans = run.spans
    by_id = {s["spanId"]: s for s in spans}
    steps = step_subtrees(spans, "rl.grpo.step")
    assert [s["attrs"]["rl.iteration"] for s, _ in steps] == [1, 2, 3]
    (job,) = [s for s in spans if s["name"] == "rl.grpo.job"]
    assert job["attrs"]["rl.model"] == "tiny-math-llama"
    assert job["attrs"]["rl.num_parameters"] > 100_000
    assert job["attrs"]["rl.data.train_examples"] == 32
    assert job["attrs"]["rl.max_steps"] == 3
    for step, under in steps:
        assert step["parentSpanId"] == job["spanId"]
        for phase in ("rl.grpo.generation", "rl.grpo.reward", "rl.grpo.policy_update"):
            assert under[phase], (step["attrs"], sorted(under))
        # rollout > generation, reward, reference (beta > 0); advantage and the update beside it
        for name in ("rl.grpo.generation", "rl.grpo.reward", "rl.grpo.reference_policy"):
            parent = by_id[under[name][0]["parentSpanId"]]
            assert parent["name"] == "rl.grpo.rollout", name
        for name in ("rl.grpo.rollout", "rl.grpo.advantage", "rl.grpo.policy_update"):
            assert under[name][0]["parentSpanId"] == step["spanId"], name
        scored = _training(under["rl.grpo.reward_function"], by_id)
        functions = sorted(s["attrs"]["rl.reward.function"] for s in scored)
        assert functions == ["correct", "short"]
        for s in under["rl.grpo.reward_function"]:
            assert by_id[s["parentSpanId"]]["name"] == "rl.grpo.reward"
        assert {s["attrs"]["rl.iteration"] for ss in under.values() for s in ss} == {
            step["attrs"]["rl.iteration"]
        }
    # The evaluation and the checkpoint of step 3 sit in step 3, as in nemo_rl's loops.
    last = steps[-1][1]
    assert last["rl.grpo.evaluate"] and last["rl.grpo.checkpoint"]
    assert last["rl.grpo.checkpoint"][0]["attrs"]["rl.checkpoint.path"].endswith("checkpoint-3")
    assert not steps[0][1]["rl.grpo.evaluate"]


@pytest.mark.parametrize("which", ["grpo", "launched"])
def test_grpo_token_counts_are_what_trl_generated(which, request):
    run: Run = request.getfixturevalue(which)
    spans = run.spans
    by_id = {s["spanId"]: s for s in spans}
    seen = run.logged("num_tokens")  # TRL's prompt + completion tokens so far, per step
    steps = step_subtrees(spans, "rl.grpo.step")
    for (_, under), before, after, length in zip(
        steps, [0.0, *seen], seen, run.logged("completions/mean_length"), strict=False
    ):
        # the evaluation's generation is not counted in TRL's num_tokens
        (generation,) = _training(under["rl.grpo.generation"], by_id)
        a = generation["attrs"]
        assert a["gen_ai.usage.input_tokens"] + a["gen_ai.usage.output_tokens"] == after - before
        assert a["gen_ai.usage.output_tokens"] == round(length * BATCH)
        assert a["rl.num_tokens"] == after - before
    points = metric_points(run.telemetry / "metrics.jsonl")
    usage = points["gen_ai.client.token.usage"]
    assert {p["attrs"]["gen_ai.provider.name"] for p in usage} == {"torch"}
    (tokens,) = points["rl.tokens"]  # a counter: its running total
    assert float(tokens.get("asDouble", tokens.get("asInt", 0))) == seen[-1]


def test_logged_scalars_become_registry_metrics(grpo):
    points = metric_points(grpo.telemetry / "metrics.jsonl")
    for metric, key in (
        ("rl.policy.loss", "loss"),
        ("rl.grad_norm", "grad_norm"),
        ("rl.learning_rate", "learning_rate"),
        ("rl.reward.mean", "reward"),
        ("rl.kl", "kl"),
    ):
        (point,) = points[metric]  # a gauge: its last value
        assert point["asDouble"] == pytest.approx(grpo.logged(key)[-1]), metric
    # nemo_rl's logger file beside them, as a nemo_rl run writes it: the report's curves
    rows = [json.loads(line) for line in (grpo.folder / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert losses == pytest.approx(grpo.logged("loss"))
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert any("validation/reward" in r for r in rows)  # TRL's eval_reward


def test_readers_read_the_runs(grpo, dpo, sft):
    for run, algorithm in ((grpo, "grpo"), (dpo, "dpo"), (sft, "sft")):
        live_check(run.telemetry)
        view = spanspec_cli("view", str(run.telemetry / "traces.jsonl"), "--step", "2")
        assert view.returncode == 0, view.stderr
        assert f"rl.{algorithm}.step (rl.iteration=2)" in view.stdout
        assert f"rl.{algorithm}.policy_update" in view.stdout
    assert "where the step time went (3 steps" in grpo.proc.stdout


def test_the_report_of_a_trl_run_opens_in_chromium_with_its_phases_and_curves(grpo, tmp_path):
    from tests.functional.test_report_browser import CHROMIUM, _console, _Dom, chromium

    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium")
    page = tmp_path / "report.html"
    done = spanspec_cli("report", str(grpo.folder), "-o", str(page))  # the run's folder
    assert done.returncode == 0, done.stderr
    shown = chromium("--dump-dom", page.as_uri() + "#step=2", profile=tmp_path / "profile")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert _console(shown.stderr) == []
    dom = _Dom()
    dom.feed(shown.stdout)
    assert dom.body.get("data-ready") == "true" and dom.text_by_id["errors"].strip() == ""
    assert "3 steps" in dom.text_by_id["meta"]
    phases = {"rl.grpo.generation", "rl.grpo.reward", "rl.grpo.policy_update"}
    assert phases <= set(dom.data["data-phase"])  # the breakdown table
    assert phases <= set(dom.data["data-name"])  # step 2's waterfall
    # TRL's logged scalars, teed to metrics.jsonl beside the traces, are the page's curves
    assert "train/loss" in dom.data["data-curve"]


@pytest.mark.ray
def test_diff_against_a_nemo_rl_grpo_run_compares_the_shared_phases(grpo, runs):
    nemo = runs / "nemo_grpo"
    run_example(
        "run_grpo.py",
        f"logger.log_dir={nemo}",
        "logger.tqdm=false",
        "grpo.max_steps=2",
        "grpo.num_prompts_per_step=4",
        "grpo.num_generations_per_prompt=2",
        "grpo.val_period=1000",
        "grpo.val_at_start=false",
        "checkpointing.enabled=false",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
    )
    proc = spanspec_cli("diff", str(nemo), str(grpo.folder), "--warmup", "0", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    rows = _phase_rows(json.loads(proc.stdout)["rows"])
    rollout, reward = "rl.grpo.rollout", "rl.grpo.reward"
    for shared in (
        (rollout,),
        (rollout, "rl.grpo.generation"),
        (rollout, reward),
        ("rl.grpo.advantage",),
        ("rl.grpo.policy_update",),
    ):
        assert rows[shared] in ("same", "slower", "faster"), (shared, rows)
    assert rows[("rl.grpo.weight_sync",)] == "only in baseline"  # TRL samples from the policy
    assert rows[(rollout, reward, "rl.grpo.reward_function")] == "only in candidate"


def _phase_rows(rows: list[dict]) -> dict[tuple[str, ...], str]:
    """``spanspec diff --format json``'s phase rows (in tree order, with their depth below the
    step) as ``{path: verdict}``."""
    out, path = {}, []
    for row in rows:
        if row["kind"] == "phase":
            path = [*path[: row["depth"] - 1], row["name"]]
            out[tuple(path)] = row["verdict"]
    return out


def test_off_exports_nothing_and_trains_the_same(grpo, grpo_off):
    assert not (grpo_off.telemetry / "traces.jsonl").exists()
    assert not (grpo_off.telemetry / "metrics.jsonl").exists()
    assert not (grpo_off.folder / "metrics.jsonl").exists()
    assert "telemetry:" not in grpo_off.proc.stdout
    assert grpo_off.logged("loss") == grpo.logged("loss")
    assert grpo_off.logged("num_tokens") == grpo.logged("num_tokens")


# -- DPO and SFT -------------------------------------------------------------------------------


def test_dpo_steps_hold_the_update_and_the_reference(dpo):
    spans = dpo.spans
    by_id = {s["spanId"]: s for s in spans}
    steps = step_subtrees(spans, "rl.dpo.step")
    assert [s["attrs"]["rl.iteration"] for s, _ in steps] == [1, 2]
    for step, under in steps:
        (update,) = under["rl.dpo.policy_update"]
        assert update["parentSpanId"] == step["spanId"]
        assert update["attrs"]["rl.num_micro_batches"] == 1
        assert any(by_id[r["parentSpanId"]] is update for r in under["rl.dpo.reference_policy"])
    (evaluate,) = steps[1][1]["rl.dpo.evaluate"]
    assert evaluate["attrs"]["rl.eval.num_samples"] == 4
    assert 0.0 <= evaluate["attrs"]["rl.eval.accuracy"] <= 1.0
    assert [s["name"] for s in spans if s["name"].endswith(".job")] == ["rl.dpo.job"]
    points = metric_points(dpo.telemetry / "metrics.jsonl")
    for metric in ("rl.preference.accuracy", "rl.validation.accuracy", "rl.validation.margin"):
        assert points[metric], metric  # TRL's rewards/accuracies, eval_rewards/margins, ...


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_trl_run_exports_its_spans_and_metrics_over_otlp(runs, tiny, protocol):
    with OtlpReceiver() as rx:
        endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint
        run = _example(
            runs,
            tiny,
            f"otlp-{protocol.split('/')[0]}",
            ("examples/trl/sft.py",),
            "--max-steps",
            "2",
            NEMO_RL_OTEL_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        )
        # flushed at the end of training: all there once the run has exited
        spans = rx.spans()
        points = rx.metric_points()
    assert not (run.telemetry / "traces.jsonl").exists()  # otlp only, no file
    steps = [s for s in spans if s.name == "rl.sft.step"]
    assert sorted(s.attributes["rl.iteration"] for s in steps) == [1, 2]
    assert {s.protocol for s in spans} == {protocol.split("/")[0]}
    updates = [s for s in spans if s.name == "rl.sft.policy_update"]
    assert sorted(u.parent_span_id for u in updates) == sorted(s.span_id for s in steps)
    (job,) = [s for s in spans if s.name == "rl.sft.job"]
    assert all(s.trace_id == job.trace_id for s in steps)
    assert {s.resource["rl.run_id"] for s in spans} == {job.resource["rl.run_id"]}
    point, _ = points["rl.policy.loss"][-1]  # TRL's logged loss, teed: a gauge's last value
    assert point.as_double == pytest.approx(run.logged("loss")[-1])


def test_sft_steps_hold_the_update(sft):
    steps = step_subtrees(sft.spans, "rl.sft.step")
    assert [s["attrs"]["rl.iteration"] for s, _ in steps] == [1, 2]
    for step, under in steps:
        assert [s["parentSpanId"] for s in under["rl.sft.policy_update"]] == [step["spanId"]]
    points = metric_points(sft.telemetry / "metrics.jsonl")
    assert points["rl.policy.loss"][0]["asDouble"] == pytest.approx(sft.logged("loss")[-1])


# -- bad input -------------------------------------------------------------------------------


def test_launcher_refuses_bad_settings_and_a_missing_script_before_training(tmp_path):
    proc = _run(
        "-m",
        "nemo_rl.integrations.trl.run",
        "examples/trl/grpo.py",
        "--output-dir",
        str(tmp_path / "never"),
        env={"NEMO_RL_OTEL_SPAN_GROUPS": "per_step,-generaton"},
        check=False,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: telemetry: NEMO_RL_OTEL_SPAN_GROUPS=")
    assert "generation" in line  # the closest valid group
    assert not (tmp_path / "never").exists()
    proc = _run("-m", "nemo_rl.integrations.trl.run", "no_such.py", check=False)
    assert proc.returncode == 2 and "no_such.py: no such script" in proc.stderr


CALLBACK_BAD_INPUT = """
import sys
from datasets import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from trl import SFTConfig, SFTTrainer
from nemo_rl.integrations.trl import TelemetryCallback

model_dir, out = sys.argv[1], sys.argv[2]
rows = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(8)]
# A trainer the callback does not know (plain transformers): one warning, trained untraced.
model = AutoModelForCausalLM.from_pretrained(model_dir)
text = Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 4)
args = TrainingArguments(out + "/plain", max_steps=1, use_cpu=True, report_to=[], save_strategy="no")
Trainer(model=model, args=args, train_dataset=text, callbacks=[TelemetryCallback()]).train()
# A bad group in the environment: one warning, trained untraced.
config = SFTConfig(out + "/sft", max_steps=1, use_cpu=True, report_to=[], save_strategy="no")
SFTTrainer(model=model_dir, args=config, train_dataset=Dataset.from_list(rows),
           callbacks=[TelemetryCallback()]).train()
print("trained")
"""


def test_callback_warns_once_and_trains_on_bad_input(tmp_path, tiny):
    script = tmp_path / "bad_input.py"
    script.write_text(CALLBACK_BAD_INPUT)
    proc = _run(str(script), str(tiny), str(tmp_path), env={"NEMO_RL_OTEL_SPAN_GROUPS": "bogus"})
    assert "trained" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("telemetry: off")]
    assert len(warnings) == 2, proc.stderr[-3000:]
    assert "Trainer is not a trainer this callback knows" in warnings[0]
    assert "NEMO_RL_OTEL_SPAN_GROUPS='bogus'" in warnings[1]
    assert not list(tmp_path.rglob("traces.jsonl"))


def test_a_trl_outside_the_tested_range_is_one_warning_and_training_goes_on(tmp_path, tiny):
    # The installed TRL, reporting another version: a distribution's metadata found first on
    # the path (the package itself still imports from the environment).
    shadow = tmp_path / "shadow" / "trl-1.10.0.dist-info"
    shadow.mkdir(parents=True)
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.10.0\n")
    run = _example(
        tmp_path,
        tiny,
        "old_trl",
        ("examples/trl/sft.py",),
        "--max-steps",
        "2",
        PYTHONPATH=str(shadow.parent),
    )
    warnings = [line for line in run.proc.stderr.splitlines() if line.startswith("telemetry:")]
    assert len(warnings) == 1, run.proc.stderr[-3000:]
    assert "TRL 1.10.0 is outside the range" in warnings[0]
    assert "<1.17,>=1.16" in warnings[0] and "training goes on" in warnings[0]
    steps = step_subtrees(run.spans, "rl.sft.step")
    assert [s["attrs"]["rl.iteration"] for s, _ in steps] == [1, 2]  # traced as usual


# -- two processes: accelerate launch -------------------------------------------------------

# The test's own script: examples/trl/grpo.py, with rank 1's "short" reward function slowed by
# $SLOW_RANK_S (read here, not by the library), so the straggler views have a rank to name.
SLOWED_GRPO = """
import functools, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "examples", "trl"))
import grpo

slow_s = float(os.environ.get("SLOW_RANK_S", "0"))
if slow_s and os.environ.get("RANK") == "1":
    short = grpo.short

    @functools.wraps(short)
    def slowed(*args, **kwargs):
        time.sleep(slow_s)
        return short(*args, **kwargs)

    grpo.short = slowed
sys.exit(grpo.main())
"""
SLOW_S = 0.3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranked(runs, tiny) -> Run:
    """TRL GRPO, 2 steps, on 2 processes. accelerate 1.16's ``--cpu`` launches one process
    (its multi-CPU launcher is mpirun); ``--multi_gpu`` is its torchrun launcher, and the
    example's ``use_cpu=True`` makes that CPU processes over gloo."""
    script = runs / "slowed_grpo.py"
    script.write_text(SLOWED_GRPO)
    launch = (
        *("-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu"),
        *("--num_processes", "2", "--num_machines", "1"),
        *("--mixed_precision", "no", "--dynamo_backend", "no"),
        *("--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port())),
        str(script),
    )
    return _example(runs, tiny, "ranked", launch, "--max-steps", "2", SLOW_RANK_S=str(SLOW_S))


def test_two_accelerate_ranks_are_in_every_step(ranked):
    spans = ranked.spans
    by_id = {s["spanId"]: s for s in spans}
    resources = {s["resource"]["rl.worker.rank"]: s["resource"] for s in spans}
    assert sorted(resources) == [0, 1]
    for resource in resources.values():
        assert resource["rl.worker.group"] == "trainer", resource
        assert resource["rl.worker.world_size"] == 2
    (run_id,) = {r["rl.run_id"] for r in resources.values()}  # the one run rank 0 named
    assert resources[0]["process.pid"] != resources[1]["process.pid"]
    (job,) = [s for s in spans if s["name"] == "rl.grpo.job"]  # rank 0's: one job
    assert job["resource"]["rl.worker.rank"] == 0 and job["attrs"]["rl.run_id"] == run_id
    steps = step_subtrees(spans, "rl.grpo.step")
    assert [s["attrs"]["rl.iteration"] for s, _ in steps] == [1, 2]  # one step span a step
    phases = {"rl.grpo.rollout", "rl.grpo.generation", "rl.grpo.reward"}
    phases |= {"rl.grpo.reward_function", "rl.grpo.advantage", "rl.grpo.policy_update"}
    for step, under in steps:
        assert step["resource"]["rl.worker.rank"] == 0
        for rank in (0, 1):
            mine = [
                s for ss in under.values() for s in ss if s["resource"]["rl.worker.rank"] == rank
            ]
            assert phases <= {s["name"] for s in mine}, (rank, sorted(s["name"] for s in mine))
            for s in mine:  # in the step's trace, below its step span, numbered as it is
                assert s["traceId"] == step["traceId"]
                assert step in ancestors(s, by_id)
                assert s["attrs"]["rl.iteration"] == step["attrs"]["rl.iteration"]
        for name in ("rl.grpo.rollout", "rl.grpo.advantage", "rl.grpo.policy_update"):
            ranks = sorted(s["resource"]["rl.worker.rank"] for s in under[name])
            assert ranks == [0, 1], name
            assert {s["parentSpanId"] for s in under[name]} == {step["spanId"]}, name
    # Every span of rank 1 sits in a step: none is left a root of its own
    for s in spans:
        if s["resource"]["rl.worker.rank"] == 1:
            assert any(a["name"] == "rl.grpo.step" for a in ancestors(s, by_id)), s["name"]
    # TRL's logged scalars are the run's: teed once (rank 0), not once a rank
    rows = [json.loads(line) for line in (ranked.folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    assert "telemetry cost: 2 processes" in ranked.proc.stdout
    live_check(ranked.telemetry)


def test_the_straggler_views_name_the_slowed_rank(ranked, tmp_path):
    out = ranked.proc.stdout  # rank 0's end-of-run summary, read from every rank's spans
    assert re.search(r"^  rl\.grpo\.reward_function +2 ", out, re.M), out[-3000:]
    found = re.findall(
        r"straggler: trainer rank 1 \(pid (\d+)\) is \d+% slower than the median in "
        r"rl\.grpo\.reward_function, the slowest in 2 of 2 steps",
        out,
    )
    pid = next(
        s["resource"]["process.pid"] for s in ranked.spans if s["resource"]["rl.worker.rank"] == 1
    )
    assert found == [str(pid)], out[-3000:]
    html = tmp_path / "report.html"
    proc = spanspec_cli("report", str(ranked.folder), "-o", str(html))
    assert proc.returncode == 0, proc.stderr
    named = [line for line in proc.stdout.splitlines() if "rl.grpo.reward_function" in line]
    assert [line.split(" is ")[0] for line in named] == ["straggler: trainer 1"]
    page = html.read_text()
    assert "<th>trainer 0</th>" in page  # the heat map: both ranks, rank 1 marked
    assert '<th>trainer 1 <b class="straggler">straggler</b></th>' in page
