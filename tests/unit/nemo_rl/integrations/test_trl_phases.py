"""nemo_rl.integrations.trl.phases without TRL: spans opened and closed apart end innermost
first with the right parents, and telemetry's own failures are counted, not raised."""

from __future__ import annotations

import logging

import pytest

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


def test_a_joined_step_holds_this_ranks_phases_under_rank_0s_step(spans):
    """Another rank joins rank 0's step from its W3C carrier: its phase spans are children of
    that step, in its trace, and it has no step span of its own."""
    from opentelemetry import trace

    from nemo_rl.integrations.trl.phases import TrainerPhases
    from spanspec import propagate

    with spanspec.span("rl.grpo.step", **{"rl.iteration": 3}):  # rank 0's, sent as a carrier
        carrier = propagate.inject()
    phases = TrainerPhases(object(), "grpo", Guard(), "tiny")
    phases.join_step(3, carrier)
    assert phases.iteration() == 3
    with spanspec.span("rl.grpo.rollout", **{"rl.iteration": phases.iteration()}):
        pass
    phases.close_step()
    assert not trace.get_current_span().get_span_context().is_valid  # the context it found
    step, rollout = spans.one("rl.grpo.step"), spans.one("rl.grpo.rollout")
    assert rollout.parent.span_id == step.context.span_id
    assert rollout.context.trace_id == step.context.trace_id
    phases.join_step(4, {})  # no carrier (rank 0's step off): a root, nothing raised
    phases.close_step()


def test_off_on_several_ranks_builds_no_group_and_sends_nothing(monkeypatch):
    pytest.importorskip("transformers")
    from nemo_rl.integrations.trl import ranks
    from nemo_rl.integrations.trl.callback import TelemetryCallback

    def no_group(*args):
        raise AssertionError("a collective while telemetry is off")

    monkeypatch.setenv("NEMO_RL_OTEL_ENABLED", "false")
    monkeypatch.setattr(ranks, "Ranks", no_group)
    for rank in (0, 1):
        callback = TelemetryCallback(algorithm="grpo")
        callback._start_ranks(object(), None, None, rank, 2)
        assert callback._ranks is None and not callback._started and callback.phases is None
