"""Verifiable tasks that turn responses into rewards, chosen by ``env.name``."""

from nemo_rl.environments.arithmetic import ArithmeticEnvironment, Problem, make_problems, score
from nemo_rl.environments.verifiers import (
    ENVIRONMENTS,
    Environment,
    ExactEnvironment,
    MathEnvironment,
    last_number,
    make_environment,
)

__all__ = [
    "ENVIRONMENTS",
    "ArithmeticEnvironment",
    "Environment",
    "ExactEnvironment",
    "MathEnvironment",
    "Problem",
    "last_number",
    "make_environment",
    "make_problems",
    "score",
]
