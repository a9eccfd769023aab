"""nemo_rl.integrations.trl.phases without TRL: spans opened and closed apart end innermost
first with the right parents, and telemetry's own failures are counted, not raised."""

from __future__ import annotations

import logging

import spanspec
from nemo_rl.integrations.trl.phases import Guard, OpenSpans, algorithm_of


def test_spans_opened_apart_nest_and_close_innermost_first(spans):
    stack = OpenSpans()
    step = stack.open("step", spanspec.span("rl.grpo.step", **{"rl.iteration": 1}), 1)
    rollout = stack.open("rollout", spanspec.span("rl.grpo.rollout", **{"rl.iteration": 1}))
    with spanspec.span("rl.grpo.generation", **{"rl.iteration": 1}):
        pass
    # The rollout ends once its rewards are in; the advantage is then a phase of the step.
    stack.close(rollout)
    stack.open("advantage", spanspec.span("rl.grpo.advantage", **{"rl.iteration": 1}))
    assert stack.find("rollout") is None and stack.top().key == "advantage"
    stack.close(step)  # ends the advantage first, then the step
    stack.close(rollout)  # already closed: nothing
    assert stack.top() is None
    s = spans.one("rl.grpo.step")
    assert {c.name for c in spans.children(s)} == {"rl.grpo.rollout", "rl.grpo.advantage"}
    assert [c.name for c in spans.children(spans.one("rl.grpo.rollout"))] == ["rl.grpo.generation"]
    assert step.iteration == 1


def test_an_exception_is_recorded_on_every_span_it_closes(spans):
    stack = OpenSpans()
    job = stack.open("job", spanspec.span("rl.sft.job", **{"rl.algorithm": "sft"}))
    stack.open("step", spanspec.span("rl.sft.step", **{"rl.iteration": 1}), 1)
    stack.close(job, ValueError("from TRL"))
    for name in ("rl.sft.step", "rl.sft.job"):
        assert not spans.one(name).status.is_ok, name


def test_guard_counts_and_warns_once(caplog):
    guard = Guard()

    def broken() -> None:
        raise KeyError("x")

    with caplog.at_level(logging.WARNING, logger="nemo_rl.integrations.trl"):
        assert guard.call("tracing _generate", broken) is None
        assert guard.call("tracing _generate", broken) is None
        assert guard.call("tracing _generate", lambda: 3) == 3
    assert guard.failures["tracing _generate"] == 2
    assert len(caplog.records) == 1 and "tracing _generate failed" in caplog.text


def test_algorithm_of_a_class_not_from_trl_is_none():
    class GRPOTrainer:  # the name alone does not make it TRL's
        pass

    assert algorithm_of(GRPOTrainer()) is None
