"""Local Hugging Face model folders: what makes one usable as a policy, its name, and loading it.

``policy.model_name`` (and ``value.model_name``, ``teacher.model_name``) is either the built-in
``tiny-llama`` (``tiny-llama-<word>`` too: the same model, named so in traces, such as
``tiny-llama-student``) or the path of a folder written by ``save_pretrained``: ``config.json``
of a causal LM, its weights (safetensors), and, unless ``policy.tokenizer`` names another
folder, its tokenizer files. A folder whose name starts with ``tiny-llama-`` is given as a path
(``./tiny-llama-x``). Nothing is downloaded: every load passes ``local_files_only=True``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import torch

__all__ = [
    "BUILTIN_MODEL",
    "embedding_rows",
    "is_builtin",
    "load_causal_lm",
    "model_folder_problem",
    "model_label",
    "save_folder",
    "without_sklearn_and_scipy",
]

BUILTIN_MODEL = "tiny-llama"
"""The randomly initialised Llama built in code (``nemo_rl.models.causal_lm``)."""

_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_DOWNLOAD_HINT = (
    "models load from local folders only; fetch a hub model first, e.g. "
    "`huggingface-cli download Qwen/Qwen2.5-0.5B --local-dir models/Qwen2.5-0.5B`"
)


def without_sklearn_and_scipy() -> None:
    """Tells transformers that scikit-learn and SciPy are absent, before this process first
    loads a model class (call it before importing one).

    transformers imports both with every model class whenever they are installed (MLflow
    requires them), each for one thing nothing here does: scikit-learn to calibrate assisted
    decoding, SciPy to match boxes in the object-detection losses. Those imports are about 2 s
    of CPU in every process of every run that builds a model. A process whose model classes are
    loaded already (a TRL script's) is left as it is.
    """
    if "transformers.generation.candidate_generator" in sys.modules:
        return
    import transformers.utils

    transformers.utils.is_sklearn_available = lambda: False
    transformers.utils.is_scipy_available = lambda: False


def is_builtin(name: str) -> bool:
    """Returns whether ``name`` is the built-in tiny Llama (``tiny-llama``, or ``tiny-llama-<word>``
    naming it in traces) rather than a folder."""
    return name == BUILTIN_MODEL or (
        name.startswith(BUILTIN_MODEL + "-") and "/" not in name and os.sep not in name
    )


def _causal_lm_classes() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update(value if isinstance(value, (tuple, list)) else [value])
    return names


@functools.lru_cache(maxsize=16)
def model_folder_problem(path: str) -> str | None:
    """Returns why ``path`` cannot be loaded with ``AutoModelForCausalLM``, or None.

    Checked without loading the weights: the folder, its ``config.json`` (readable by
    ``AutoConfig``, of an architecture ``AutoModelForCausalLM`` knows, and not a classifier or
    an encoder with another head), and a weights file.
    """
    if not os.path.exists(path):
        return (
            f"{path}: no such folder (give {BUILTIN_MODEL!r}, the built-in model, or the path "
            f"of a local Hugging Face model folder; {_DOWNLOAD_HINT})"
        )
    if not os.path.isdir(path):
        return f"{path}: a file, not a folder (give the folder that holds config.json)"
    if not os.path.isfile(os.path.join(path, "config.json")):
        return (
            f"{path}: no config.json there, so not a Hugging Face model folder (save_pretrained "
            "writes config.json, model.safetensors and the tokenizer files)"
        )
    try:
        config = _config(path)
    except Exception as e:  # transformers says why (bad JSON, unknown model_type); one line of it
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"{path}/config.json: cannot be read as a model config ({first})"
    causal = _causal_lm_classes()
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a in causal for a in architectures):
        return (
            f"{path}: a {architectures[0]}, not a causal LM (AutoModelForCausalLM cannot load "
            "it as a next-token model; give a ...ForCausalLM folder)"
        )
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not architectures and config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return (
            f"{path}: a {config.model_type!r} model, not a causal LM (give a ...ForCausalLM folder)"
        )
    if not any(os.path.isfile(os.path.join(path, f)) for f in _WEIGHTS):
        return f"{path}: no weights there (expected model.safetensors, as save_pretrained writes)"
    return None


def _config(path: str) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path, local_files_only=True)


def embedding_rows(path: str) -> int:
    """Returns the rows of the input embeddings of the model in folder ``path`` (its
    ``vocab_size``): the largest token id it can read is one less."""
    config = _config(path)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.vocab_size)


@functools.lru_cache(maxsize=16)
def model_label(name: str) -> str:
    """Returns the model's name for traces (``rl.model``) and metrics: ``tiny-llama``; for a
    folder, its config's ``_name_or_path`` when that is a name (``org/model``, as written by
    :func:`save_folder` or a hub download), else the folder's own name."""
    if is_builtin(name):
        return name
    try:
        with open(os.path.join(name, "config.json"), encoding="utf-8") as f:
            given = json.load(f).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        given = None
    # A path (an uploader's /home/... or ./out) names a machine, not a model.
    if isinstance(given, str) and given and not given.startswith((".", "/", "~")):
        if given.count("/") <= 1 and not os.path.exists(given):
            return given
    return os.path.basename(os.path.normpath(name))


def save_folder(model: Any, tokenizer: Any, folder: str, label: str | None = None) -> str:
    """Writes ``model`` (a ``PreTrainedModel``) and ``tokenizer`` (anything with
    ``save_pretrained``) to ``folder`` as a Hugging Face folder; with ``label``, records it as
    the config's ``_name_or_path`` (``save_pretrained`` leaves that out), so a checkpoint's
    folder, named ``hf``, still says which model it holds. Returns ``folder``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if label is not None:
        _write_label(folder, label)
    return folder


def _write_label(folder: str, label: str) -> None:
    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["_name_or_path"] = label
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def load_causal_lm(path: str, meta: bool = False) -> torch.nn.Module:
    """Returns the causal LM in folder ``path`` in float32 (``AutoModelForCausalLM``, local files
    only); with ``meta``, only its structure on the meta device (no weights read: for shapes and
    parameter counts). Raises ``ValueError`` saying why a path is no such folder (never a hub
    look-up: a name that is not a folder is not tried as a model id)."""
    if not os.path.isdir(path):
        raise ValueError(model_folder_problem(path) or f"{path}: not a folder")
    without_sklearn_and_scipy()
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per load in every worker's log says nothing
    if meta:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(_config(path), dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
