"""DPO on real Ray actors: a short run on a fixed seed ranks held-out pairs right."""

import pytest

from nemo_rl.algorithms import dpo

pytestmark = pytest.mark.ray


@pytest.mark.slow
def test_short_run_raises_held_out_preference_accuracy_and_margin(ray_cluster, supervised_run):
    _, summary = supervised_run(
        dpo, "learn", "dpo.max_steps=30", "dpo.val_period=30", "checkpointing.enabled=false"
    )
    (step0, start), (step30, end) = summary.validation
    assert (step0, step30) == (0, 30)
    # At step 0 the policy is its reference: every margin is 0, so no pair counts as ranked right.
    assert start == {"accuracy": 0.0, "margin": 0.0}
    assert end["accuracy"] >= 0.65 and end["margin"] >= 0.3, end
    accuracy = summary.curves["preference_accuracy"]
    assert sum(accuracy[-5:]) / 5 > sum(accuracy[:5]) / 5 + 0.1, accuracy
