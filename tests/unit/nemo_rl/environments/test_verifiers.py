"""The verifiers ``env.name`` chooses: ``math`` compares last numbers, ``exact`` stripped text."""

from decimal import Decimal

import pytest

from nemo_rl.environments import (
    ArithmeticEnvironment,
    ExactEnvironment,
    MathEnvironment,
    last_number,
    make_environment,
)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("42", "42"),
        ("so 3+4 = 7.", "7"),
        ("#### 1,234", "1234"),
        ("-0.50 left", "-0.50"),
        ("1e3", "1e3"),
        (".5", ".5"),
        ("no digits", None),
    ],
)
def test_last_number(text, number):
    assert last_number(text) == (None if number is None else Decimal(number))


def test_math_compares_the_last_numbers_numerically():
    env = MathEnvironment()
    responses = ["15", "it is 15.0", "15 or 16", "fifteen", "1,500"]
    answers = ["15", "15", "15", "15", "1500"]
    assert env.step(responses, answers, [True, False, True, True, True]) == [1, 1, 0, 0, 1]
    assert env.is_correct("x = 0.5", "1/2 = 0.50", stopped=False)
    assert env.answer_problem("seven") and env.answer_problem("#### 7") is None


def test_exact_compares_stripped_text():
    env = ExactEnvironment()
    assert env.step([" Paris\n", "paris", "Paris."], ["Paris", "Paris", "Paris"], [1, 1, 1]) == [
        1.0,
        0.0,
        0.0,
    ]
    assert env.answer_problem("anything") is None


def test_every_verifier_refuses_batches_of_different_lengths():
    for env in (MathEnvironment(), ExactEnvironment(), ArithmeticEnvironment()):
        with pytest.raises(ValueError, match="2 responses, 1 answers"):
            env.step(["1", "2"], ["1"], [True, True])


def test_make_environment_names_the_valid_verifiers():
    assert isinstance(make_environment("math"), MathEnvironment)
    with pytest.raises(ValueError, match="valid: arithmetic, math, exact"):
        make_environment("maths")
