"""Drives one real vLLM engine (``VllmGeneration`` in-process) the way GRPO does, and prints what
it saw as one JSON line: run by tests/functional/test_vllm_real.py in a subprocess, so vLLM's
process-wide state (its tracer provider, its patched ``torch.set_num_threads``) stays out of the
pytest process.

    python tests/functional/vllm_engine_probe.py OUT_DIR
    python tests/functional/vllm_engine_probe.py --folder MODEL_FOLDER

Telemetry comes from the env (the test sets the OTLP endpoint and protocol vLLM exports to). With
``--folder``, the engine loads a Hugging Face model folder as it is, prompts go through its own
tokenizer, and the torch policy is a ``PolicyWorker`` started from the same folder.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

import spanspec
from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm, token_logprobs
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.telemetry import (
    RunIdentity,
    TelemetryConfig,
    init_telemetry_driver,
    shutdown_telemetry,
)

TEMPERATURE = 0.8
PROMPTS = ["42+7=", "3+5=", "10+9=", "71+2="]


def _max_gap(model: torch.nn.Module, out: dict) -> float:
    # The engine's log-probs of its sampled tokens vs the torch policy's for the same sequences.
    ref = token_logprobs(model, out["output_ids"], out["attention_mask"], TEMPERATURE)
    mask = out["response_mask"].bool()
    return float((ref[mask] - out["logprobs"][mask]).abs().max())


def main(out_dir: Path) -> None:
    from nemo_rl.models.generation.vllm_backend import VllmGeneration

    tok = CharTokenizer()
    cfg = ModelConfig()
    policy = build_causal_lm(cfg, tok.vocab_size, seed=42).eval()
    other = build_causal_lm(cfg, tok.vocab_size, seed=7).eval()
    policy.save_pretrained(out_dir / "hf")
    handle = init_telemetry_driver(
        TelemetryConfig(exporter="file", span_groups="all", vllm_native_tracing=True),
        RunIdentity("grpo", "tiny-llama", str(out_dir)),
    )
    start = time.perf_counter()
    gen = VllmGeneration(
        str(out_dir / "hf"),
        "tiny-llama",
        GenerationConfig(backend="vllm", max_new_tokens=3, temperature=TEMPERATURE),
        tok,
        seed=0,
    )
    start_s = time.perf_counter() - start
    ids, mask = left_pad([tok.encode(p, add_bos=True) for p in PROMPTS * 4], tok.pad_token_id)
    result: dict = {"engine_start_s": start_s, "run_id": handle.settings.run_id}
    with torch.no_grad():
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 0}) as step:
            result["step_trace_id"] = f"{step.get_span_context().trace_id:032x}"
            before = gen.generate(ids, mask, seed=5)
        result["gap_before_sync"] = _max_gap(policy, before)
        result["response_tokens"] = int(before["response_mask"].sum())
        # Four copies of each prompt, one seed each: the copies are not all one sample.
        rows = [tuple(r) for r in before["output_ids"][:, ids.shape[1] :].tolist()]
        result["distinct_responses"] = len(set(rows))
        result["sync_bytes"] = gen.update_weights(
            {k: v.clone() for k, v in other.state_dict().items()}
        )
        after = gen.generate(ids, mask, seed=5)
        result["gap_after_sync_new_weights"] = _max_gap(other, after)
        result["gap_after_sync_old_weights"] = _max_gap(policy, after)
        result["texts"] = gen.generate_text(PROMPTS[:2])
    gen.close()
    shutdown_telemetry()
    print(json.dumps(result))


def folder(model: str) -> None:
    from nemo_rl.data import load_tokenizer
    from nemo_rl.models.generation.torch_backend import TorchGeneration
    from nemo_rl.models.generation.vllm_backend import VllmGeneration
    from nemo_rl.models.policy import PolicyConfig, PolicyWorker

    tok = load_tokenizer(model)
    policy = PolicyWorker(
        PolicyConfig(model_name=model), tok.vocab_size, 0, temperature=TEMPERATURE, reference=False
    )
    cfg = GenerationConfig(backend="vllm", max_new_tokens=3, temperature=TEMPERATURE)
    start = time.perf_counter()
    gen = VllmGeneration(model, model, cfg, tok, seed=0)
    result: dict = {"engine_start_s": time.perf_counter() - start, "label": gen.model_name}
    ids, mask = left_pad([tok.encode(p, add_bos=True) for p in PROMPTS * 4], tok.pad_token_id)
    sampled = gen.generate(ids, mask, seed=5)
    ref = policy.get_logprobs(
        {"input_ids": sampled["output_ids"], "attention_mask": sampled["attention_mask"]}
    )
    on = sampled["response_mask"].bool()
    result["response_tokens"] = int(on.sum())
    result["gap"] = float((ref[on] - sampled["logprobs"][on]).abs().max())
    torch_gen = TorchGeneration(
        policy.cfg.model, model, cfg, tok.vocab_size, tok.eos_token_id, tok.pad_token_id, 0
    )
    by_vllm, by_torch = (g.generate(ids, mask, greedy=True) for g in (gen, torch_gen))
    keys = ("output_ids", "response_mask")
    result["greedy_equal"] = all(torch.equal(by_vllm[k], by_torch[k]) for k in keys)
    result["texts"] = gen.generate_text(PROMPTS[:2])
    gen.close()
    print(json.dumps(result))


if __name__ == "__main__":  # vLLM may start worker processes: the entry script needs the guard
    if sys.argv[1] == "--folder":
        folder(sys.argv[2])
    else:
        main(Path(sys.argv[1]))
