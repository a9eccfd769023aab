"""Data-parallel training is exact: one update of a 2-rank group equals one rank's on the same
global batch, for every loss the loops train with, whatever the micro-batch size.

Real Ray actors and a real gloo process group (the ranks' gradients meet in an all-reduce).
"""

from __future__ import annotations

import pytest
import torch

from nemo_rl.algorithms.advantages import state_values
from nemo_rl.algorithms.loss_functions import (
    ClippedPGLoss,
    ClippedPGLossConfig,
    ClippedValueLoss,
    ClippedValueLossConfig,
    DPOLoss,
    NLLLoss,
)
from nemo_rl.data import CharTokenizer, encode_completions, encode_preference_pairs
from nemo_rl.data.pairs import PreferencePair
from nemo_rl.distributed.batches import concat_rows, split_minibatches, split_rows
from nemo_rl.models.causal_lm import ModelConfig
from nemo_rl.models.policy import PolicyConfig, PolicyGroup, PolicyWorker

pytestmark = pytest.mark.ray

TOK = CharTokenizer()
SMALL = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)
PROMPTS = ["42+7=", "3+5=", "61+8=", "10+1=", "7+2=", "88+1=", "5+5=", "20+9="]
ANSWERS = ["49", "8", "69", "11", "9", "89", "10", "29"]


def _config(num_workers: int, micro: int, head: str = "lm") -> PolicyConfig:
    # Two optimiser steps of 4 sequences each: the split must follow the mini-batches.
    return PolicyConfig(
        model=SMALL,
        head=head,
        lr=1e-2,
        num_workers=num_workers,
        train_global_batch_size=4,
        train_micro_batch_size=micro,
        train_passes=1,
        max_grad_norm=0.5,  # small enough to clip: the norm must be the global one
    )


def _completions() -> dict[str, torch.Tensor]:
    return encode_completions(TOK, PROMPTS, ANSWERS)


def _grpo_batch() -> dict[str, torch.Tensor]:
    batch = _completions()
    scorer = PolicyWorker(_config(1, 8), TOK.vocab_size, seed=3)  # another policy: ratios != 1
    batch["prev_logprobs"] = scorer.get_logprobs(batch)
    batch["ref_logprobs"] = scorer.get_reference_logprobs(batch)
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.0, 1.0])
    return batch


def _dpo_batch() -> dict[str, torch.Tensor]:
    pairs = [PreferencePair(p, a, str(int(a) + 1)) for p, a in zip(PROMPTS, ANSWERS, strict=True)]
    batch = encode_preference_pairs(TOK, pairs)
    n = len(pairs)
    batch["chosen_ref_logprobs"] = torch.linspace(-3.0, -1.0, n)
    batch["rejected_ref_logprobs"] = torch.linspace(-1.0, -3.0, n)
    return batch


def _value_batch() -> dict[str, torch.Tensor]:
    batch = _completions()
    scorer = PolicyWorker(_config(1, 8, head="scalar"), TOK.vocab_size, seed=3, reference=False)
    batch["values"] = state_values(scorer.get_values(batch))
    batch["returns"] = batch["values"] + torch.linspace(-1.0, 1.0, batch["values"].shape[1])
    return batch


CASES = {
    "grpo": (ClippedPGLoss(ClippedPGLossConfig()), "lm", _grpo_batch),
    "sft": (NLLLoss(), "lm", _completions),
    "dpo": (DPOLoss(0.5), "lm", _dpo_batch),
    "value": (ClippedValueLoss(ClippedValueLossConfig()), "scalar", _value_batch),
}


def _update(loss, head, batch, num_workers: int, micro: int) -> tuple[dict, dict]:
    group = PolicyGroup(
        _config(num_workers, micro, head),
        TOK.vocab_size,
        0,
        loss,
        name="value" if head == "scalar" else "policy",
        reference=head == "lm",
        num_cpus=0.5,
    )
    try:
        metrics = group.train(batch)
        weights = group.workers.run_all("state_dict")
    finally:
        group.close()
    for other in weights[1:]:  # every rank stepped to the same weights
        for k, v in weights[0].items():
            assert torch.equal(v, other[k]), k
    return metrics, weights[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_make_the_one_rank_update(case, ray_cluster):
    loss, head, make = CASES[case]
    batch = make()
    one_metrics, one = _update(loss, head, batch, num_workers=1, micro=4)
    for micro in (4, 1):  # and the micro-batch split does not matter either
        two_metrics, two = _update(loss, head, batch, num_workers=2, micro=micro)
        for k, v in one.items():
            torch.testing.assert_close(two[k], v, atol=1e-5, rtol=0, msg=f"{case} {k}")
        # The logged loss and statistics are global, not a mean of the ranks' means.
        for key in ("loss", "grad_norm", "num_tokens", "num_optimizer_steps"):
            assert two_metrics[key] == pytest.approx(one_metrics[key], rel=1e-5), key
        # Per rank: two mini-batches of 2 rows, each in micro-batches of `micro`.
        assert two_metrics["num_micro_batches"] == 2 * -(-2 // micro)


def test_minibatches_are_shared_out_in_order():
    batch = {"x": torch.arange(12)}
    shards = split_minibatches(batch, 2, 4)  # mini-batches [0..3] [4..7] [8..11]
    assert [s["x"].tolist() for s in shards] == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 10, 11]]
    assert [s["x"].tolist() for s in split_rows(batch, 5)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
        [8, 9],
        [10, 11],
    ]
    assert concat_rows(split_rows(batch, 3))["x"].tolist() == list(range(12))
    with pytest.raises(ValueError, match="mini-batch of 3 rows does not split into 2 ranks"):
        split_minibatches({"x": torch.arange(7)}, 2, 4)


def test_every_rank_loads_the_model_folder_and_two_make_the_one_rank_update(tiny_hf, ray_cluster):
    from transformers import AutoModelForCausalLM

    from nemo_rl.data import load_tokenizer
    from nemo_rl.models.tiny_hf import TINY_MODEL

    folder = str(tiny_hf / TINY_MODEL)
    tok = load_tokenizer(folder)
    batch = encode_completions(tok, PROMPTS, ANSWERS)
    saved = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).state_dict()
    after = {}
    for num_workers in (1, 2):
        cfg = _config(num_workers, 4).model_copy(update={"model_name": folder, "lr": 1e-3})
        group = PolicyGroup(cfg, tok.vocab_size, 0, NLLLoss(), reference=False, num_cpus=0.5)
        try:
            for weights in group.workers.run_all("state_dict"):  # each rank read the folder
                for k, v in saved.items():
                    assert torch.equal(weights[k], v), k
            group.train(batch)
            after[num_workers] = group.workers.run_all("state_dict")
        finally:
            group.close()
    for weights in after[2]:
        for k, v in after[1][0].items():
            torch.testing.assert_close(weights[k], v, atol=1e-5, rtol=0, msg=k)
