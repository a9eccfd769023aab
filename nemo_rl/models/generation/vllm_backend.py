"""The vLLM generation backend (GPU): same interface as the torch one, on ``vllm.LLM``.

vLLM is imported inside the class, so this module imports on machines without it (CPU CI). The
engine loads the policy from a Hugging Face folder written by ``PolicyWorker.save_pretrained``;
later weights arrive through ``update_weights`` and are loaded in place with
``LLM.apply_model``. The tokenizer is ours (character-level), so the engine starts with
``skip_tokenizer_init=True`` and is fed token ids (``TokensPrompt``).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import torch
from opentelemetry import trace

import spanspec
from nemo_rl.data.collate import left_pad
from nemo_rl.data.tokenizer import CharTokenizer
from nemo_rl.distributed import carries_trace, close_worker, init_worker
from nemo_rl.models.generation.interface import (
    GenerationConfig,
    GenerationInterface,
    GenerationOutput,
    num_bytes,
)
from nemo_rl.telemetry import get_telemetry, record_token_usage
from spanspec.export import TelemetryCost

__all__ = ["VllmGeneration", "assemble_output", "native_tracing_args"]

_log = logging.getLogger("nemo_rl.generation.vllm")


def _load_weights(weights: dict[str, torch.Tensor], model: Any) -> int:
    # Runs inside the vLLM worker process; vLLM's models map HF names in load_weights.
    loaded = model.load_weights(weights=list(weights.items()))
    return len(loaded) if loaded is not None else len(weights)


def _set_usage(span_name: str, input_tokens: int, output_tokens: int) -> None:
    # The traced span is current only when its group is on; never annotate someone else's span.
    span = trace.get_current_span()
    if getattr(span, "name", None) == span_name:
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


def native_tracing_args() -> dict[str, Any]:
    """Returns the ``vllm.LLM`` arguments that switch on vLLM's own OpenTelemetry spans.

    Empty unless this process exports telemetry with ``vllm_native_tracing`` on and an OTLP
    traces endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``): vLLM exports its spans itself, over OTLP only.
    """
    handle = get_telemetry()
    if handle is None or not handle.is_exporting or not handle.settings.vllm_native_tracing:
        return {}
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        _log.warning(
            "telemetry: vllm_native_tracing is on but no OTLP endpoint is set "
            "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT); "
            "vLLM's own spans stay off"
        )
        return {}
    return {"otlp_traces_endpoint": endpoint}


def assemble_output(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: list[tuple[list[int], list[float]]],
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
) -> GenerationOutput:
    """Returns the ``GenerationOutput`` layout from per-row ``(token_ids, logprobs)`` responses.

    The prompt keeps its left padding and each response is right-padded to ``max_new_tokens``,
    exactly as the torch backend lays it out. Raises ``ValueError`` if a response is too long.
    """
    batch, prompt_len = input_ids.shape
    width = prompt_len + max_new_tokens
    ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    ids[:, :prompt_len] = input_ids
    mask = torch.zeros((batch, width), dtype=torch.long)
    mask[:, :prompt_len] = attention_mask
    response_mask = torch.zeros((batch, width), dtype=torch.long)
    logprobs = torch.zeros((batch, width))
    stopped = torch.zeros(batch, dtype=torch.bool)
    for row, (tokens, lps) in enumerate(responses):
        if len(tokens) > max_new_tokens:
            raise ValueError(f"row {row}: {len(tokens)} tokens > max_new_tokens={max_new_tokens}")
        end = prompt_len + len(tokens)
        ids[row, prompt_len:end] = torch.tensor(tokens, dtype=torch.long)
        mask[row, prompt_len:end] = 1
        response_mask[row, prompt_len:end] = 1
        logprobs[row, prompt_len:end] = torch.tensor(lps, dtype=torch.float32)
        stopped[row] = bool(tokens) and tokens[-1] == eos_token_id
    return GenerationOutput(
        output_ids=ids,
        attention_mask=mask,
        response_mask=response_mask,
        logprobs=logprobs,
        stopped=stopped,
    )


class VllmGeneration(GenerationInterface):
    """A vLLM engine behind ``GenerationInterface``; used as a Ray actor on a GPU node.

    Raises ``ImportError`` at construction when vLLM is not installed.
    """

    def __init__(
        self,
        model_dir: str,
        model_name: str,
        gen_cfg: GenerationConfig,
        tokenizer: CharTokenizer,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        init_worker(rank, world_size, "generation")
        import vllm  # lazy: GPU-only dependency

        self._vllm = vllm
        self.cfg = gen_cfg
        self.tokenizer = tokenizer
        self.model_name = model_name
        # apply_model sends a function to the engine's worker process; V1 needs this to pickle it.
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        with spanspec.span("rl.vllm.load_model", **{"gen_ai.request.model": model_name}):
            self.llm = vllm.LLM(
                model=model_dir,
                skip_tokenizer_init=True,
                seed=seed,
                # bf16: every vLLM attention backend takes it; the PG ratio absorbs the rounding.
                dtype="bfloat16",
                enforce_eager=True,  # no CUDA-graph capture for a model this small
                # Log-probs after temperature, as the policy worker computes them (vLLM >= 0.10).
                logprobs_mode="processed_logprobs",
                gpu_memory_utilization=gen_cfg.gpu_memory_utilization,
                **native_tracing_args(),
            )

    def _sampling_params(self, greedy: bool, seed: int | None) -> Any:
        return self._vllm.SamplingParams(
            temperature=0.0 if greedy else self.cfg.temperature,
            max_tokens=self.cfg.max_new_tokens,
            logprobs=0,  # 0: the log-prob of the sampled token only
            seed=seed,
            stop_token_ids=[self.tokenizer.eos_token_id],
            detokenize=False,
        )

    @carries_trace
    @spanspec.traced(
        "rl.vllm.generate",
        **{"gen_ai.system": "vllm", "gen_ai.operation.name": "text_completion"},
    )
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """Returns responses from the vLLM engine; see ``GenerationInterface.generate``."""
        prompts = [
            self._vllm.inputs.TokensPrompt(prompt_token_ids=row[m.bool()].tolist())
            for row, m in zip(input_ids, attention_mask, strict=True)
        ]
        outputs = self.llm.generate(prompts, self._sampling_params(greedy, seed), use_tqdm=False)
        responses = []
        for out in outputs:
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            # logprobs[i] maps token id -> Logprob for position i; the sampled token is always in it.
            lps = [
                float(step[tok].logprob)
                for tok, step in zip(tokens, completion.logprobs, strict=True)
            ]
            responses.append((tokens, lps))
        result = assemble_output(
            input_ids,
            attention_mask,
            responses,
            self.cfg.max_new_tokens,
            self.tokenizer.eos_token_id,
            self.tokenizer.pad_token_id,
        )
        n_in, n_out = int(attention_mask.sum()), int(result["response_mask"].sum())
        _set_usage("rl.vllm.generate", n_in, n_out)
        record_token_usage(n_in, n_out, system="vllm")
        return result

    @carries_trace
    @spanspec.traced(
        "rl.vllm.generate_text",
        **{"gen_ai.system": "vllm", "gen_ai.operation.name": "text_completion"},
    )
    def generate_text(self, prompts: list[str], greedy: bool = True) -> list[str]:
        """Returns the decoded response to each prompt text (tokenized with our tokenizer)."""
        ids, mask = left_pad(
            [self.tokenizer.encode(p, add_bos=True) for p in prompts], self.tokenizer.pad_token_id
        )
        out = self.generate(ids, mask, greedy=greedy)
        width = ids.shape[1]
        return [self.tokenizer.decode(row[width:]) for row in out["output_ids"].tolist()]

    @carries_trace
    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Loads the policy's weights into the running engine; returns the bytes received."""
        size = num_bytes(state_dict)
        with spanspec.span("rl.worker.update_weights", **{"rl.weight_sync.num_bytes": size}):
            self.llm.apply_model(functools.partial(_load_weights, state_dict))
        return size

    def close(self) -> TelemetryCost | None:
        """Flushes this worker's telemetry; call before the actor is killed. Returns what the
        worker's telemetry cost (None in-process)."""
        return close_worker()
