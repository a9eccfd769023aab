import torch

from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.causal_lm import ModelConfig
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.generation.torch_backend import TorchGeneration
from nemo_rl.models.policy import PolicyConfig, PolicyWorker

TOK = CharTokenizer()
SMALL = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)


def _batch(policy: PolicyWorker, advantages: torch.Tensor) -> dict[str, torch.Tensor]:
    gen = TorchGeneration(
        SMALL,
        "tiny",
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
    policy = PolicyWorker(cfg, TOK.vocab_size, seed=0)
    adv = torch.tensor([1.0, -1.0] * 4)
    batch = _batch(policy, adv)
    before = _seq_logprob(policy, batch)
    metrics = policy.train(batch)
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
        policy = PolicyWorker(cfg, TOK.vocab_size, seed=0)
        batch = _batch(policy, torch.tensor([1.0, -1.0] * 4))
        m = policy.train(batch)
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
    a = PolicyWorker(cfg, TOK.vocab_size, seed=0)
    batch = _batch(a, torch.tensor([1.0, -1.0] * 4))
    a.train(batch)
    a.save_checkpoint(str(tmp_path))
    b = PolicyWorker(cfg, TOK.vocab_size, seed=0)
    b.load_checkpoint(str(tmp_path))
    # the next update is identical: weights, Adam moments and schedule all came back
    ma, mb = a.train(batch), b.train(batch)
    assert ma == mb
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])
