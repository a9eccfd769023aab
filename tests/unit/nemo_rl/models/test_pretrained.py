"""Local Hugging Face model folders: what is refused and why, the name traces use, and the models
``build_model`` makes from a folder (nothing is downloaded)."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from nemo_rl.models.causal_lm import (
    ModelConfig,
    ScalarHeadModel,
    build_model,
    model_parameter_count,
    parameter_count,
    token_logprobs,
)
from nemo_rl.models.pretrained import (
    is_builtin,
    load_causal_lm,
    model_folder_problem,
    model_label,
    save_folder,
)
from nemo_rl.models.tiny_hf import TINY_MODEL


def _bert(folder) -> str:
    from transformers import BertConfig

    BertConfig(
        vocab_size=20,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        architectures=["BertForMaskedLM"],
    ).save_pretrained(folder)
    return str(folder)


def test_a_folder_that_is_no_causal_lm_is_refused_saying_why(tmp_path, tiny_hf):
    model = str(tiny_hf / TINY_MODEL)
    assert model_folder_problem(model) is None
    assert "no such folder" in model_folder_problem(str(tmp_path / "nope"))
    assert "huggingface-cli download" in model_folder_problem(str(tmp_path / "nope"))
    (tmp_path / "file").write_text("x")
    assert "a file, not a folder" in model_folder_problem(str(tmp_path / "file"))
    (tmp_path / "empty").mkdir()
    assert "no config.json" in model_folder_problem(str(tmp_path / "empty"))
    assert "BertForMaskedLM, not a causal LM" in model_folder_problem(_bert(tmp_path / "bert"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "no-such-model"}')
    assert "cannot be read as a model config" in model_folder_problem(str(bad))
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text((tiny_hf / TINY_MODEL / "config.json").read_text())
    assert "no weights" in model_folder_problem(str(weightless))


def test_a_name_that_is_no_folder_is_never_looked_up_on_the_hub(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        load_causal_lm("Qwen/Qwen2.5-0.5B")
    with pytest.raises(ValueError, match="no such folder"):
        build_model("some-model", ModelConfig(), 15, 0)


def test_builtin_names_and_labels(tmp_path, tiny_hf):
    assert is_builtin("tiny-llama") and is_builtin("tiny-llama-student")
    assert not is_builtin("./tiny-llama-student") and not is_builtin("tiny-llamas")
    assert model_label("tiny-llama-value") == "tiny-llama-value"
    assert model_label(str(tiny_hf / TINY_MODEL)) == TINY_MODEL  # the folder's name
    # a checkpoint's folder is called hf: the name it was saved with is the model's
    model = load_causal_lm(str(tiny_hf / TINY_MODEL))
    from nemo_rl.data import CharTokenizer

    save_folder(model, CharTokenizer(), str(tmp_path / "hf"), "org/my-model")
    assert model_label(str(tmp_path / "hf")) == "org/my-model"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config["_name_or_path"] = "/home/someone/models/x"  # an uploader's path names no model
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    model_label.cache_clear()
    assert model_label(str(tmp_path / "hf")) == "hf"


def test_build_model_loads_the_folders_weights_and_puts_a_scalar_head_on_its_trunk(tiny_hf):
    folder = str(tiny_hf / TINY_MODEL)
    lm = build_model(folder, ModelConfig(), 999, seed=0)
    assert lm.dtype == torch.float32 and lm.get_input_embeddings().weight.shape[0] == 15
    again = build_model(folder, ModelConfig(hidden_size=8), 3, seed=5)  # config and seed unused
    for (name, a), (_, b) in zip(lm.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    critic = build_model(folder, ModelConfig(), 15, seed=0, head="scalar")
    assert isinstance(critic, ScalarHeadModel)
    assert torch.equal(
        critic.trunk.embed_tokens.weight, lm.get_input_embeddings().weight
    )  # the trunk starts as the policy's
    ids, mask = torch.tensor([[1, 4, 5, 13]]), torch.ones(1, 4, dtype=torch.long)
    assert critic(ids, mask).shape == (1, 4)
    assert token_logprobs(lm, ids, mask).shape == (1, 4)


def test_a_meta_model_counts_parameters_without_reading_weights(tiny_hf):
    folder = str(tiny_hf / TINY_MODEL)
    meta = build_model(folder, ModelConfig(), 15, 0, meta=True)
    assert next(meta.parameters()).is_meta
    assert parameter_count(meta) == parameter_count(build_model(folder, ModelConfig(), 15, 0))
    builtin = build_model("tiny-llama", ModelConfig(), 15, 0, meta=True)
    assert parameter_count(builtin) == parameter_count(meta)  # the same shape as built in
    scalar = build_model("tiny-llama", ModelConfig(), 15, 0, head="scalar", meta=True)
    assert parameter_count(scalar) == parameter_count(meta) - 15 * 128 + 129  # head: 128 + bias


@pytest.mark.parametrize(
    "shape",
    [{}, {"hidden_size": 32, "intermediate_size": 80, "num_layers": 3, "num_heads": 2}],
)
@pytest.mark.parametrize("head", ["lm", "scalar"])
def test_the_parameter_count_is_the_built_models(tiny_hf, shape, head):
    cfg = ModelConfig(**shape)
    built = build_model("tiny-llama", cfg, 23, 0, head=head)
    assert model_parameter_count("tiny-llama", cfg, 23, head) == parameter_count(built)
    if shape:  # a folder's count: its own shape, whatever cfg says
        folder = str(tiny_hf / TINY_MODEL)
        loaded = build_model(folder, cfg, 23, 0, head=head)
        assert model_parameter_count(folder, cfg, 23, head) == parameter_count(loaded)


UNUSED_IMPORTS_PROBE = """
import sys
from nemo_rl.models.causal_lm import ModelConfig, build_model, build_scalar_model
build_model("tiny-llama", ModelConfig(), 40, 0)
build_scalar_model(ModelConfig(), 40, 0)
import transformers.generation.candidate_generator
print(sorted(m for m in ("sklearn", "scipy") if m in sys.modules))
"""


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("sklearn", "scipy")),
    reason="scikit-learn or SciPy not installed",
)
def test_building_a_model_imports_neither_scikit_learn_nor_scipy():
    """transformers imports both (installed with MLflow) with every model class, for assisted
    decoding and object detection only: a process where nemo_rl loads the model classes skips
    them."""
    out = subprocess.run(
        [sys.executable, "-c", UNUSED_IMPORTS_PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"
