import torch

from nemo_rl.data import CharTokenizer, left_pad
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm, token_logprobs
from nemo_rl.models.generation.interface import GenerationConfig
from nemo_rl.models.generation.torch_backend import TorchGeneration

TOK = CharTokenizer()
SMALL = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)


def _gen(max_new_tokens: int = 4, temperature: float = 1.0) -> TorchGeneration:
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature)
    return TorchGeneration(
        SMALL, "tiny-llama", cfg, TOK.vocab_size, TOK.eos_token_id, TOK.pad_token_id, seed=0
    )


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad(
        [TOK.encode(p, add_bos=True) for p in ["42+7=", "3+5=", "10+0="]], TOK.pad_token_id
    )


def test_sampled_logprobs_match_a_full_forward_of_the_output():
    # The KV-cached sampler and the training-time forward must agree, or the PG ratio starts off 1.
    gen = _gen(temperature=0.7)
    ids, mask = _prompts()
    out = gen.generate(ids, mask, seed=1)
    full = token_logprobs(gen.model, out["output_ids"], out["attention_mask"], temperature=0.7)
    rm = out["response_mask"].bool()
    torch.testing.assert_close(full[rm], out["logprobs"][rm], atol=1e-5, rtol=1e-5)
    assert (out["logprobs"][~rm] == 0).all()


def test_layout_prompt_left_padded_response_right_padded():
    gen = _gen()
    ids, mask = _prompts()
    out = gen.generate(ids, mask, seed=0)
    width = ids.shape[1]
    assert out["output_ids"].shape == (3, width + 4)
    assert torch.equal(out["output_ids"][:, :width], ids)
    assert torch.equal(out["attention_mask"][:, :width], mask)
    for row in range(3):
        resp = out["response_mask"][row, width:].tolist()
        n = sum(resp)
        assert resp == [1] * n + [0] * (4 - n)  # contiguous, then padding
        tokens = out["output_ids"][row, width : width + n].tolist()
        assert out["stopped"][row] == (tokens[-1] == TOK.eos_token_id)
        assert TOK.eos_token_id not in tokens[:-1]


def test_seeded_sampling_repeats_and_greedy_is_deterministic():
    gen = _gen()
    ids, mask = _prompts()
    a, b = gen.generate(ids, mask, seed=5), gen.generate(ids, mask, seed=5)
    assert torch.equal(a["output_ids"], b["output_ids"])
    g1, g2 = (
        gen.generate(ids, mask, greedy=True, seed=1),
        gen.generate(ids, mask, greedy=True, seed=2),
    )
    assert torch.equal(g1["output_ids"], g2["output_ids"])


def test_left_padding_does_not_change_a_prompt_s_response():
    gen = _gen()
    alone_ids, alone_mask = left_pad([TOK.encode("3+5=", add_bos=True)], TOK.pad_token_id)
    ids, mask = _prompts()
    alone = gen.generate(alone_ids, alone_mask, greedy=True)
    batched = gen.generate(ids, mask, greedy=True)
    assert (
        alone["output_ids"][0, alone_ids.shape[1] :].tolist()
        == batched["output_ids"][1, ids.shape[1] :].tolist()
    )


def test_update_weights_loads_the_policy_and_reports_bytes():
    gen = _gen()
    other = build_causal_lm(SMALL, TOK.vocab_size, seed=123)
    n = gen.update_weights(other.state_dict())
    assert n == sum(p.numel() * p.element_size() for p in other.state_dict().values())
    for k, v in other.state_dict().items():
        assert torch.equal(gen.model.state_dict()[k], v)
