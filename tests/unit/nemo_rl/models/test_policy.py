from dataclasses import dataclass

import pytest
import torch

from nemo_rl.algorithms.loss_functions import ClippedPGLoss, ClippedPGLossConfig
from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.causal_lm import ModelConfig, token_logprobs
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.generation.torch_backend import TorchGeneration
from nemo_rl.models.policy import PolicyConfig, PolicyWorker

TOK = CharTokenizer()
SMALL = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)
GRPO_LOSS = ClippedPGLoss(ClippedPGLossConfig())


def _batch(policy: PolicyWorker, advantages: torch.Tensor) -> dict[str, torch.Tensor]:
    gen = TorchGeneration(
        SMALL,
        "tiny-llama",
        GenerationConfig(),
        TOK.vocab_size,
        TOK.eos_token_id,
        TOK.pad_token_id,
        seed=0,
    )
    ids, mask = left_pad(
        [TOK.encode(p, add_bos=True) for p in ["42+7=", "3+5="] * 4], TOK.pad_token_id
    )
    out = gen.generate(ids, mask, seed=0)
    batch = {
        "input_ids": out["output_ids"],
        "attention_mask": out["attention_mask"],
        "response_mask": out["response_mask"],
    }
    batch["prev_logprobs"] = policy.get_logprobs(batch)
    batch["ref_logprobs"] = policy.get_reference_logprobs(batch)
    batch["advantages"] = advantages
    return batch


def _seq_logprob(policy: PolicyWorker, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return (policy.get_logprobs(batch) * batch["response_mask"]).sum(-1)


def test_training_raises_good_and_lowers_bad_sequences():
    cfg = PolicyConfig(
        model=SMALL, lr=1e-2, train_global_batch_size=4, train_micro_batch_size=2, train_passes=1
    )
    policy = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=GRPO_LOSS)
    adv = torch.tensor([1.0, -1.0] * 4)
    batch = _batch(policy, adv)
    before = _seq_logprob(policy, batch)
    metrics = policy.train(batch).metrics()
    after = _seq_logprob(policy, batch)
    assert metrics["num_optimizer_steps"] == 2  # 8 sequences in steps of 4
    assert metrics["grad_norm"] > 0 and metrics["lr"] == 1e-2
    delta = after - before
    # Samples share tokens, so single rows may move together; on average the update separates them.
    assert delta[adv > 0].mean() > 0 > delta[adv < 0].mean()
    # the policy moved, the reference did not
    assert 0.0 <= metrics["kl"] < 0.1  # zero until the first optimiser step moves the policy
    assert not torch.equal(policy.get_logprobs(batch), policy.get_reference_logprobs(batch))


def test_micro_batching_does_not_change_the_update():
    results = []
    for mbs in (8, 2):
        cfg = PolicyConfig(
            model=SMALL,
            lr=1e-2,
            train_global_batch_size=8,
            train_micro_batch_size=mbs,
            train_passes=1,
        )
        policy = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=GRPO_LOSS)
        batch = _batch(policy, torch.tensor([1.0, -1.0] * 4))
        m = policy.train(batch).metrics()
        results.append((m["loss"], policy.state_dict()))
    assert abs(results[0][0] - results[1][0]) < 1e-6
    for k, v in results[0][1].items():
        torch.testing.assert_close(
            v, results[1][1][k], atol=1e-5, rtol=1e-3
        )  # float sums in another order


def test_checkpoint_round_trip_restores_model_and_optimizer(tmp_path):
    cfg = PolicyConfig(
        model=SMALL, lr=1e-2, train_global_batch_size=8, train_micro_batch_size=8, train_passes=1
    )
    a = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=GRPO_LOSS)
    batch = _batch(a, torch.tensor([1.0, -1.0] * 4))
    a.train(batch)
    a.save_checkpoint(str(tmp_path))
    b = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=GRPO_LOSS)
    b.load_checkpoint(str(tmp_path))
    # the next update is identical: weights, Adam moments and schedule all came back
    ma, mb = a.train(batch).metrics(), b.train(batch).metrics()
    assert ma.pop("flops_per_sec") > 0 and mb.pop("flops_per_sec") > 0  # a rate: timing differs
    assert ma == mb
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])


@dataclass(frozen=True)
class _MeanLogprobLoss:
    """A loss no algorithm ships: raise the log-prob of every response token, per sequence."""

    required_keys: frozenset[str] = frozenset({"input_ids", "attention_mask", "response_mask"})

    def normalizer(self, batch):
        return torch.tensor(float(batch["input_ids"].shape[0]))

    def __call__(self, model, batch):
        logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
        per_seq = (logp * batch["response_mask"]).sum(-1)
        return -per_seq.sum(), {"seq_logprob": per_seq.sum().detach(), "rows": torch.tensor(1.0)}


def test_worker_trains_with_any_loss_and_reports_its_statistics():
    cfg = PolicyConfig(model=SMALL, lr=1e-2, train_global_batch_size=4, train_micro_batch_size=2)
    policy = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=_MeanLogprobLoss(), reference=False)
    batch = _batch(PolicyWorker(cfg, TOK.vocab_size, seed=0), torch.zeros(8))
    batch = {k: batch[k] for k in ("input_ids", "attention_mask", "response_mask")}
    before = _seq_logprob(policy, batch).mean()
    metrics = policy.train(batch).metrics()
    assert _seq_logprob(policy, batch).mean() > before
    # the loss's own statistic, averaged over its normalizer (sequences): 4 micro-batches of 2
    assert set(metrics) >= {"loss", "seq_logprob", "rows", "grad_norm", "lr", "num_tokens"}
    assert metrics["rows"] == pytest.approx(4 * 2 / 16)
    assert metrics["loss"] == pytest.approx(-metrics["seq_logprob"])
    with pytest.raises(ValueError, match="reference"):
        policy.get_reference_logprobs(batch)


def test_missing_batch_keys_and_missing_loss_are_clear_errors():
    cfg = PolicyConfig(model=SMALL)
    policy = PolicyWorker(cfg, TOK.vocab_size, seed=0)
    with pytest.raises(ValueError, match="no loss function"):
        policy.train({"input_ids": torch.zeros(1, 3, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"missing \['advantages'"):
        policy.train({"input_ids": torch.zeros(1, 3, dtype=torch.long)}, loss_fn=GRPO_LOSS)


def test_scalar_head_gives_one_value_per_token_and_starts_from_a_checkpoint(tmp_path):
    cfg = PolicyConfig(model=SMALL, head="scalar")
    a = PolicyWorker(cfg, TOK.vocab_size, seed=0, reference=False)
    ids, mask = left_pad([TOK.encode(p, add_bos=True) for p in ["1+2=3", "40+5="]], 0)
    values = a.get_values({"input_ids": ids, "attention_mask": mask})
    assert values.shape == ids.shape and values.dtype == torch.float32
    with pytest.raises(ValueError, match="cannot give policy scores"):
        a.get_logprobs({"input_ids": ids, "attention_mask": mask})
    a.save_checkpoint(str(tmp_path / "step_3" / "policy"))
    b = PolicyWorker(
        cfg.model_copy(update={"checkpoint": str(tmp_path / "step_3")}),
        TOK.vocab_size,
        seed=1,
        reference=False,
    )
    torch.testing.assert_close(b.get_values({"input_ids": ids, "attention_mask": mask}), values)


def test_a_checkpoint_holds_the_policy_as_a_hugging_face_folder(tmp_path, tiny_hf):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nemo_rl.models.pretrained import model_label

    for name in ["tiny-llama", str(tiny_hf / "tiny-math-llama")]:
        cfg = PolicyConfig(model_name=name, model=SMALL, lr=1e-2, train_passes=1)
        policy = PolicyWorker(cfg, TOK.vocab_size, seed=0, loss_fn=GRPO_LOSS)
        policy.train(_batch(policy, torch.tensor([1.0, -1.0] * 4)))
        folder = tmp_path / model_label(name) / "policy"
        assert policy.save_checkpoint(str(folder)) == str(folder / "policy.pt")
        loaded = AutoModelForCausalLM.from_pretrained(folder / "hf", local_files_only=True)
        for key, value in policy.state_dict().items():  # the trained weights, as they are
            assert torch.equal(loaded.state_dict()[key], value), key
        tokenizer = AutoTokenizer.from_pretrained(folder / "hf", local_files_only=True)
        assert tokenizer.encode("42+7=") == TOK.encode("42+7=", add_bos=True)
        assert model_label(str(folder / "hf")) == model_label(name)  # named as the model it was


def test_a_scalar_head_model_keeps_only_its_resumable_checkpoint(tmp_path):
    cfg = PolicyConfig(model=SMALL, head="scalar")
    PolicyWorker(cfg, TOK.vocab_size, seed=0, reference=False).save_checkpoint(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.pt"]
