import random

import pytest

from nemo_rl.data import CharTokenizer
from nemo_rl.environments import ArithmeticEnvironment, make_problems, score


def test_exact_answer_scores_one():
    assert score("49", "49", stopped=True) == 1.0


def test_shaping_ranks_closer_responses_higher():
    answer = "49"
    ranked = [
        score("", answer, stopped=True),  # nothing
        score("+", answer, stopped=True),  # not a number
        score("7", answer, stopped=False),  # a number
        score("17", answer, stopped=False),  # right length
        score("19", answer, stopped=False),  # right length, ones digit right
        score("19", answer, stopped=True),  # ... and a clean stop
        score("49", answer, stopped=False),  # every digit right but no eos
        score("49", answer, stopped=True),  # exact
    ]
    assert ranked == sorted(ranked)
    assert ranked[0] == ranked[1] == 0.0
    assert all(r <= 0.6 for r in ranked[:-1])


def test_random_policy_earns_some_reward():
    # Uniform tokens over the tokenizer's outputs, as a freshly initialised model roughly samples.
    tok = CharTokenizer()
    train, _ = make_problems(seed=0)
    rng = random.Random(0)
    env = ArithmeticEnvironment()
    responses, stopped, answers = [], [], []
    for p in rng.choices(train, k=2000):
        ids = [rng.randrange(tok.vocab_size) for _ in range(3)]
        stop = tok.eos_token_id in ids
        responses.append(tok.decode(ids))
        stopped.append(stop)
        answers.append(p.answer)
    rewards = env.step(responses, answers, stopped)
    mean = sum(rewards) / len(rewards)
    assert 0.02 < mean < 0.5


def test_problems_carry_free_and_split_disjoint():
    train, val = make_problems(seed=0, max_first=99, max_second=9)
    assert len(val) == round(0.2 * (len(train) + len(val)))
    assert not {p.prompt for p in train} & {p.prompt for p in val}
    for p in train + val:
        a, b = map(int, p.prompt[:-1].split("+"))
        assert a % 10 + b <= 9 and int(p.answer) == a + b
    assert make_problems(seed=0) == (train, val)
    assert make_problems(seed=1) != (train, val)
    with_carry, _ = make_problems(seed=0, max_first=9, max_second=9, carry=True)
    assert len(with_carry) == 80


def test_step_checks_lengths():
    with pytest.raises(ValueError, match="2 responses"):
        ArithmeticEnvironment().step(["1", "2"], ["1"], [True])
