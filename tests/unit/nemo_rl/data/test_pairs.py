"""Preference pairs and completion batches built from prompt/answer problems."""

import pytest
import torch

from nemo_rl.data import (
    CharTokenizer,
    encode_completions,
    encode_preference_pairs,
    make_preference_pairs,
    stack_pair_sides,
)
from nemo_rl.environments import Problem, make_problems

TOK = CharTokenizer()


def test_pairs_reject_a_varied_wrong_sum_drawn_by_seed_and_prompt():
    train, _ = make_problems(0)
    pairs = make_preference_pairs(train, seed=7, per_problem=3)
    assert len(pairs) == 3 * len(train)
    for p in pairs:
        assert p.chosen == str(eval(p.prompt.rstrip("=")))  # the right sum
        assert p.rejected != p.chosen and 0 < abs(int(p.rejected) - int(p.chosen)) <= 10
    by_prompt = {}
    for p in pairs:
        by_prompt.setdefault(p.prompt, []).append(p.rejected)
    assert all(len(set(w)) == 3 for w in by_prompt.values())  # a problem's wrong sums differ
    offsets = {int(p.rejected) - int(p.chosen) for p in pairs}
    assert {-10, -1, 1, 10} <= offsets  # ones digit and tens digit misses both occur
    # the same seed gives the same pairs whatever order the problems come in
    again = make_preference_pairs(list(reversed(train)), seed=7, per_problem=3)
    assert sorted(map(repr, again)) == sorted(map(repr, pairs))
    assert make_preference_pairs(train, seed=8) != make_preference_pairs(train, seed=7)


def test_pairs_refuse_bad_input():
    with pytest.raises(ValueError, match=r"per_problem=11: expected 1\.\.10"):
        make_preference_pairs([Problem("1+1=", "2")], seed=0, per_problem=11)
    with pytest.raises(ValueError, match="is not a number"):
        make_preference_pairs([Problem("1+1=", "two")], seed=0)


def test_completions_mask_only_the_answer_and_its_eos():
    batch = encode_completions(TOK, ["42+7=", "3+5="], ["49", "8"])
    ids, mask, response = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
    assert ids.shape == mask.shape == response.shape == (2, 9)
    assert TOK.decode(ids[0][response[0].bool()]) == "49"
    assert ids[0][response[0].bool()].tolist()[-1] == TOK.eos_token_id
    assert TOK.decode(ids[1][response[1].bool()]) == "8"
    assert mask[1].tolist() == [1] * 7 + [0] * 2 and response[1].sum() == 2  # right padding


def test_pair_batches_share_a_width_and_stack_chosen_first():
    pairs = make_preference_pairs([Problem("3+5=", "8"), Problem("42+7=", "49")], seed=1)
    batch = encode_preference_pairs(TOK, pairs)
    assert batch["chosen_input_ids"].shape == batch["rejected_input_ids"].shape
    both = stack_pair_sides(batch)
    assert sorted(both) == ["attention_mask", "input_ids", "response_mask"]
    assert torch.equal(both["input_ids"][:2], batch["chosen_input_ids"])
    assert torch.equal(both["input_ids"][2:], batch["rejected_input_ids"])
