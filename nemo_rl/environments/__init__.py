"""Verifiable tasks that turn responses into rewards."""

from nemo_rl.environments.arithmetic import ArithmeticEnvironment, Problem, make_problems, score

__all__ = ["ArithmeticEnvironment", "Problem", "make_problems", "score"]
