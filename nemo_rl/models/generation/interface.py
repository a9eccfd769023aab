"""The contract every generation backend (torch, vLLM) implements."""

from __future__ import annotations

import abc
from typing import Literal, TypedDict

import torch
from pydantic import BaseModel, ConfigDict

__all__ = ["GenerationConfig", "GenerationInterface", "GenerationOutput", "num_bytes"]


class GenerationConfig(BaseModel):
    """How responses are sampled."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["torch", "vllm"] = "torch"
    """Generation backend: the torch worker (CPU) or vLLM (GPU)."""
    max_new_tokens: int = 3
    """Upper bound on generated tokens per response (eos included)."""
    temperature: float = 1.0
    """Sampling temperature; the policy's log-probs use the same one."""
    gpu_memory_utilization: float = 0.3
    """vLLM only: fraction of GPU memory the engine may take."""


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
