"""A tiny Hugging Face model folder and a small JSONL math set, written in code (nothing is
downloaded): the one-minute try of the model-and-data path (``scripts/make_tiny_hf.py``) and the
tests' fixture.

The folder holds what ``save_pretrained`` writes for any causal LM (``config.json``,
``model.safetensors``, ``generation_config.json``) and a tokenizer built with the ``tokenizers``
library (``tokenizer.json``: one token per character of ``0-9+=``, bos/eos/pad), so
``AutoModelForCausalLM`` and ``AutoTokenizer`` load it like a model from the hub.
"""

from __future__ import annotations

import os

from nemo_rl.data.jsonl import write_jsonl
from nemo_rl.data.tokenizer import CharTokenizer
from nemo_rl.environments import make_problems
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm
from nemo_rl.models.pretrained import save_folder

__all__ = ["TINY_MODEL", "save_tiny_llama", "write_math_set"]

TINY_MODEL = "tiny-math-llama"
"""The folder name :func:`save_tiny_llama` is given by the script (and so ``rl.model``)."""


def save_tiny_llama(folder: str, model: ModelConfig | None = None, seed: int = 0) -> str:
    """Writes a randomly initialised Llama of shape ``model`` (default: the built-in tiny one,
    ~0.8M parameters) with weights from ``seed``, and its character tokenizer, to ``folder``;
    returns ``folder``."""
    tokenizer = CharTokenizer()
    lm = build_causal_lm(model or ModelConfig(), tokenizer.vocab_size, seed)
    return save_folder(lm, tokenizer, folder)


def write_math_set(
    folder: str, seed: int = 0, max_first: int = 99, max_second: int = 9
) -> tuple[str, str]:
    """Writes carry-free additions as ``{"prompt": "42+7=", "answer": "49"}`` lines to
    ``folder/math_train.jsonl`` and a held-out fifth to ``folder/math_val.jsonl``; returns the
    two paths."""
    train, val = make_problems(seed, max_first, max_second)
    paths = (os.path.join(folder, "math_train.jsonl"), os.path.join(folder, "math_val.jsonl"))
    for path, problems in zip(paths, (train, val), strict=True):
        write_jsonl(path, ({"prompt": p.prompt, "answer": p.answer} for p in problems))
    return paths
