"""vLLM is GPU-only and not installed in CI: these tests run the backend against a FAKE `vllm`
module (a mock, clearly) that records what our code asks of vLLM's public API and answers in
vLLM's output shapes. They check our side of the contract, not vLLM."""

import os
import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.generation.interface import GenerationConfig

TOK = CharTokenizer()


@dataclass
class _Logprob:
    logprob: float


class _FakeLLM:
    instances: ClassVar[list["_FakeLLM"]] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.applied = []
        _FakeLLM.instances.append(self)

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params))
        outs = []
        for i, p in enumerate(prompts):
            tokens = [*TOK.encode(str(i)), TOK.eos_token_id]
            completion = types.SimpleNamespace(
                token_ids=tokens, logprobs=[{t: _Logprob(-0.5 - j)} for j, t in enumerate(tokens)]
            )
            outs.append(
                types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[completion])
            )
        return outs

    def apply_model(self, fn):
        model = types.SimpleNamespace(
            load_weights=lambda weights: self.applied.append(dict(weights)) or set()
        )
        return [fn(model)]


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM = _FakeLLM
    mod.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    mod.inputs = types.SimpleNamespace(
        TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    )
    monkeypatch.setitem(sys.modules, "vllm", mod)
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
    ids, mask = left_pad(
        [TOK.encode("42+7=", add_bos=True), TOK.encode("3+5=", add_bos=True)], TOK.pad_token_id
    )
    out = gen.generate(ids, mask, seed=11)
    prompts, params = llm.calls[0]
    assert prompts[1]["prompt_token_ids"] == TOK.encode("3+5=", add_bos=True)  # padding stripped
    assert (
        params.logprobs == 0
        and params.temperature == 0.8
        and params.max_tokens == 3
        and params.seed == 11
    )
    assert params.stop_token_ids == [TOK.eos_token_id]
    width = ids.shape[1]
    assert TOK.decode(out["output_ids"][1, width:].tolist()) == "1"
    assert out["stopped"].tolist() == [True, True]
    assert out["logprobs"][0, width : width + 2].tolist() == [-0.5, -1.5]
    assert out["response_mask"][0].sum() == 2

    greedy = gen.generate(ids, mask, greedy=True)
    assert llm.calls[1][1].temperature == 0.0
    assert greedy["output_ids"].shape == out["output_ids"].shape


def test_generate_text_and_update_weights(fake_vllm):
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    gen = VllmGeneration("/tmp/hf", "tiny", GenerationConfig(), TOK, seed=0)
    assert gen.generate_text(["1+1=", "2+2="]) == ["0", "1"]
    weights = {"w": torch.zeros(4, dtype=torch.float32)}
    assert gen.update_weights(weights) == 16
    assert list(_FakeLLM.instances[0].applied[0]) == ["w"]


@pytest.mark.parametrize(
    ("native", "endpoint", "expected"),
    [
        ("true", "http://127.0.0.1:4317", {"otlp_traces_endpoint": "http://127.0.0.1:4317"}),
        ("true", None, {}),  # nowhere to send vLLM's spans: off, with a warning
        ("false", "http://127.0.0.1:4317", {}),
    ],
)
def test_vllm_native_tracing_follows_the_telemetry_settings(
    fake_vllm, monkeypatch, tmp_path, caplog, native, endpoint, expected
):
    from nemo_rl import telemetry
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    saved = dict(os.environ)  # the driver writes NEMO_RL_OTEL_* for its workers
    for key in [k for k in os.environ if k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_"))]:
        monkeypatch.delenv(key)
    if endpoint:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    monkeypatch.chdir(tmp_path)
    try:
        telemetry.init_telemetry_driver(
            {"telemetry": {"exporter": "file", "vllm_native_tracing": native}}, "grpo"
        )
        VllmGeneration("/tmp/hf", "tiny", GenerationConfig(), TOK, seed=0)
    finally:
        telemetry.shutdown_telemetry(2)
        os.environ.clear()
        os.environ.update(saved)
    kwargs = _FakeLLM.instances[0].kwargs
    assert {k: v for k, v in kwargs.items() if k == "otlp_traces_endpoint"} == expected
    warned = [r for r in caplog.records if "vllm_native_tracing" in r.getMessage()]
    assert len(warned) == (native == "true" and endpoint is None)
