"""Verifiers for a dataset's answers, chosen by ``env.name``: ``math`` and ``exact`` (the built-in
``arithmetic`` lives in ``arithmetic.py``).

- ``math``: the last number in the response equals the answer's last number numerically
  (``1,234`` is ``1234``, ``0.50`` is ``0.5``, ``1e3`` is ``1000``), so a response may show its
  working before the result, and an answer may be a number inside text (``#### 72``).
- ``exact``: the response, stripped of surrounding white space, equals the stripped answer.

Both give 1.0 or 0.0 and ignore whether the response stopped with eos: the answer decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Protocol

from nemo_rl.environments.arithmetic import ArithmeticEnvironment, check_batch

__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "ExactEnvironment",
    "MathEnvironment",
    "last_number",
    "make_environment",
]

# A signed decimal with optional thousands separators and exponent: 3, -4.5, 1,234, .5, 2e-3.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


class Environment(Protocol):
    """What a loop asks of a verifier."""

    def step(
        self, responses: Sequence[str], answers: Sequence[str], stopped: Sequence[bool]
    ) -> list[float]:
        """Returns one reward per response."""
        ...

    def is_correct(self, response: str, answer: str, stopped: bool) -> bool:
        """Returns whether ``response`` answers ``answer`` (exact-match evaluation)."""
        ...

    def answer_problem(self, answer: str) -> str | None:
        """Returns why ``answer`` can never be matched (checked as the data loads), or None."""
        ...


def last_number(text: str) -> Decimal | None:
    """Returns the last number written in ``text`` (thousands commas dropped), or None."""
    for match in reversed(_NUMBER.findall(text)):
        try:
            return Decimal(match.replace(",", ""))
        except InvalidOperation:  # "1." and the like parse; this guards the odd leftover
            continue
    return None


class _RightOrWrong:
    """A verifier whose reward is 1.0 for a correct response and 0.0 otherwise."""

    def step(
        self, responses: Sequence[str], answers: Sequence[str], stopped: Sequence[bool]
    ) -> list[float]:
        """Returns one reward per response; raises ``ValueError`` if the lengths differ."""
        check_batch(responses, answers, stopped)
        rows = zip(responses, answers, stopped, strict=True)
        return [float(self.is_correct(r, a, s)) for r, a, s in rows]

    @staticmethod
    def is_correct(response: str, answer: str, stopped: bool) -> bool:
        """Returns whether ``response`` answers ``answer``."""
        raise NotImplementedError


class MathEnvironment(_RightOrWrong):
    """1.0 when the response's last number equals the answer's, numerically; else 0.0."""

    @staticmethod
    def is_correct(response: str, answer: str, stopped: bool) -> bool:
        """Returns whether the last numbers of ``response`` and ``answer`` are equal."""
        got, want = last_number(response), last_number(answer)
        return got is not None and want is not None and got == want

    @staticmethod
    def answer_problem(answer: str) -> str | None:
        """Returns why ``answer`` holds no number to compare with, or None."""
        if last_number(answer) is None:
            return f"answer {answer!r} holds no number (env.name=math compares numbers)"
        return None


class ExactEnvironment(_RightOrWrong):
    """1.0 when the stripped response equals the stripped answer; else 0.0."""

    @staticmethod
    def is_correct(response: str, answer: str, stopped: bool) -> bool:
        """Returns whether ``response.strip() == answer.strip()``."""
        return response.strip() == answer.strip()

    @staticmethod
    def answer_problem(answer: str) -> str | None:
        """Every answer can be matched exactly: returns None."""
        return None


ENVIRONMENTS: dict[str, type[Environment]] = {
    "arithmetic": ArithmeticEnvironment,
    "math": MathEnvironment,
    "exact": ExactEnvironment,
}
"""``env.name`` -> the verifier class."""


def make_environment(name: str) -> Environment:
    """Returns the verifier called ``name``; raises ``ValueError`` naming the valid ones."""
    try:
        return ENVIRONMENTS[name]()
    except KeyError:
        raise ValueError(
            f"env.name={name!r}: no such verifier (valid: {', '.join(ENVIRONMENTS)})"
        ) from None
