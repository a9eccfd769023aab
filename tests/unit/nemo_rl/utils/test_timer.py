import time

import spanspec
from nemo_rl.utils.timer import Timer
from spanspec.testing import capture


def test_timing_key_is_the_span_name_and_both_are_emitted():
    timer = Timer()
    with capture(groups="all") as spans:
        with timer.span("rl.grpo.step", **{"rl.iteration": 3}):
            with timer.span("rl.grpo.reward", **{"rl.iteration": 3}) as s:
                time.sleep(0.01)
                spanspec.annotate(s, **{"rl.reward.mean": 0.25})
    seconds = timer.take()
    assert set(seconds) == {"rl.grpo.step", "rl.grpo.reward"} == set(spans.names())
    assert seconds["rl.grpo.step"] >= seconds["rl.grpo.reward"] >= 0.01
    reward = spans.one("rl.grpo.reward")
    assert reward.attributes["rl.reward.mean"] == 0.25
    assert reward.parent.span_id == spans.one("rl.grpo.step").context.span_id
    assert timer.take() == {}  # take() starts afresh


def test_timer_times_even_when_telemetry_is_off_and_when_the_block_raises():
    spanspec.deactivate()
    timer = Timer()
    try:
        with timer.span("rl.grpo.rollout", **{"rl.iteration": 0}) as s:
            assert not s.is_recording()
            spanspec.annotate(s, **{"rl.num_tokens": 1})  # off: nothing to do
            raise KeyError("boom")
    except KeyError:
        pass
    assert timer.take()["rl.grpo.rollout"] > 0
