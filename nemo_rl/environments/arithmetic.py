"""A verifiable arithmetic task: prompts like ``12+7=``, answers like ``19``.

The reward is 1.0 for the exact answer followed by end-of-sequence. Wrong answers earn shaped
partial credit (a leading number, the right number of digits, digits in the right places, a clean
stop), so even a random policy scores above zero and GRPO has a gradient from the first step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ArithmeticEnvironment", "Problem", "make_problems", "score"]

# Shaping weights; their sum stays well below 1.0 so the exact answer is always the best response.
_HAS_NUMBER = 0.1
_RIGHT_LENGTH = 0.1
_DIGITS = 0.3
_CLEAN_STOP = 0.1


@dataclass(frozen=True)
class Problem:
    """One arithmetic problem: the prompt text and its answer text."""

    prompt: str
    answer: str


def make_problems(
    seed: int, max_operand: int = 9, ops: str = "+", val_fraction: float = 0.2
) -> tuple[list[Problem], list[Problem]]:
    """Returns ``(train, validation)``: every ``a<op>b=`` with operands in ``[0, max_operand]``,
    shuffled by ``seed`` and split so no validation prompt is ever trained on.

    Raises ``ValueError`` for an unknown operator or a split that leaves either side empty.
    """
    unknown = set(ops) - set("+-*")
    if unknown:
        raise ValueError(f"unknown operators {sorted(unknown)}; use any of '+-*'")
    problems = []
    for op in ops:
        for a in range(max_operand + 1):
            for b in range(max_operand + 1):
                if op == "-" and b > a:
                    continue  # keep answers non-negative: the alphabet has no sign for responses
                value = {"+": a + b, "-": a - b, "*": a * b}[op]
                problems.append(Problem(f"{a}{op}{b}=", str(value)))
    random.Random(seed).shuffle(problems)
    n_val = round(len(problems) * val_fraction)
    if n_val < 1 or n_val >= len(problems):
        raise ValueError(f"val_fraction={val_fraction} leaves an empty split of {len(problems)} problems")
    return problems[n_val:], problems[:n_val]


def score(response: str, answer: str, stopped: bool) -> float:
    """Returns the reward of ``response`` (decoded up to eos) for ``answer``.

    ``stopped`` says whether the response ended with eos (rather than running out of tokens).
    1.0 for the exact answer with a clean stop; otherwise partial credit below 0.6.
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
    # Right-aligned so the ones digit is compared with the ones digit whatever the length.
    matches = sum(d == a for d, a in zip(reversed(digits), reversed(answer), strict=False))
    reward += _DIGITS * matches / len(answer)
    if stopped and digits == response:
        reward += _CLEAN_STOP
    return min(reward, 0.6)


class ArithmeticEnvironment:
    """Scores batches of responses to arithmetic prompts."""

    def step(
        self, responses: Sequence[str], answers: Sequence[str], stopped: Sequence[bool]
    ) -> list[float]:
        """Returns one reward per response; raises ``ValueError`` if the lengths differ."""
        if not len(responses) == len(answers) == len(stopped):
            raise ValueError(
                f"got {len(responses)} responses, {len(answers)} answers, {len(stopped)} stop flags"
            )
        return [score(r, a, s) for r, a, s in zip(responses, answers, stopped, strict=True)]

    @staticmethod
    def is_correct(response: str, answer: str, stopped: bool) -> bool:
        """Returns whether ``response`` is exactly ``answer`` with a clean stop."""
        return stopped and response == answer
