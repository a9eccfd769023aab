"""A verifiable arithmetic task: prompts like ``42+7=``, answers like ``49``.

The default problems add a number below 100 and a digit *without carries*: the answer's tens
digit is the first operand's, and its ones digit is the sum of the two ones digits. Every answer
digit follows a rule shared by many problems, so the held-out split (operand pairs never trained
on) measures whether the policy learned addition, not whether it memorised prompts.

The reward is 1.0 for the exact answer followed by end-of-sequence. Wrong answers earn shaped
partial credit (starting with a number, the right number of digits, each digit in its right
place, a clean stop), so even a random policy scores above zero and GRPO has a gradient from the
first step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ArithmeticEnvironment", "Problem", "make_problems", "score"]

# Shaping weights; a wrong answer earns at most 0.6, so the exact answer is always the best one.
_HAS_NUMBER = 0.1
_RIGHT_LENGTH = 0.1
_DIGITS = 0.3
_CLEAN_STOP = 0.1
_MAX_PARTIAL = 0.6


@dataclass(frozen=True)
class Problem:
    """One arithmetic problem: the prompt text and its answer text."""

    prompt: str
    answer: str


def make_problems(
    seed: int,
    max_first: int = 99,
    max_second: int = 9,
    carry: bool = False,
    val_fraction: float = 0.2,
) -> tuple[list[Problem], list[Problem]]:
    """Returns ``(train, validation)`` problems ``a+b=`` with ``a <= max_first``, ``b <= max_second``.

    With ``carry=False`` only sums whose digits never carry are kept. The problems are shuffled
    by ``seed`` and split so no validation prompt is ever trained on. Raises ``ValueError`` for a
    split that leaves either side empty.
    """
    problems = []
    for a in range(max_first + 1):
        for b in range(max_second + 1):
            if not carry and _carries(a, b):
                continue
            problems.append(Problem(f"{a}+{b}=", str(a + b)))
    random.Random(seed).shuffle(problems)
    n_val = round(len(problems) * val_fraction)
    if n_val < 1 or n_val >= len(problems):
        raise ValueError(
            f"val_fraction={val_fraction} leaves an empty split of {len(problems)} problems"
        )
    return problems[n_val:], problems[:n_val]


def _carries(a: int, b: int) -> bool:
    while a or b:
        if a % 10 + b % 10 > 9:
            return True
        a, b = a // 10, b // 10
    return False


def score(response: str, answer: str, stopped: bool) -> float:
    """Returns the reward of ``response`` (decoded up to eos) for ``answer``.

    ``stopped`` says whether the response ended with eos (rather than running out of tokens).
    1.0 for the exact answer with a clean stop; otherwise partial credit of at most 0.6. Digits
    are compared right-aligned, so the ones digit is judged against the ones digit whatever the
    response's length.
    """
    if stopped and response == answer:
        return 1.0
    digits = ""
    for c in response:
        if not c.isdigit():
            break
        digits += c
    if not digits:
        return 0.0
    reward = _HAS_NUMBER
    if len(digits) == len(answer):
        reward += _RIGHT_LENGTH
    matches = sum(d == a for d, a in zip(reversed(digits), reversed(answer), strict=False))
    reward += _DIGITS * matches / len(answer)
    if stopped and digits == response:
        reward += _CLEAN_STOP
    return min(reward, _MAX_PARTIAL)


def check_batch(responses: Sequence[str], answers: Sequence[str], stopped: Sequence[bool]) -> None:
    """Raises ``ValueError`` unless a verifier got one answer and one stop flag per response."""
    if not len(responses) == len(answers) == len(stopped):
        raise ValueError(
            f"got {len(responses)} responses, {len(answers)} answers, {len(stopped)} stop flags"
        )


class ArithmeticEnvironment:
    """Scores batches of responses to arithmetic prompts."""

    def step(
        self, responses: Sequence[str], answers: Sequence[str], stopped: Sequence[bool]
    ) -> list[float]:
        """Returns one reward per response; raises ``ValueError`` if the lengths differ."""
        check_batch(responses, answers, stopped)
        return [score(r, a, s) for r, a, s in zip(responses, answers, stopped, strict=True)]

    @staticmethod
    def is_correct(response: str, answer: str, stopped: bool) -> bool:
        """Returns whether ``response`` is exactly ``answer`` with a clean stop."""
        return stopped and response == answer

    @staticmethod
    def answer_problem(answer: str) -> str | None:
        """Every answer gets shaped credit (digits compared right-aligned): returns None."""
        return None
