"""SFT on real Ray actors: a short run on a fixed seed learns to add held-out problems."""

import pytest

from nemo_rl.algorithms import sft

pytestmark = pytest.mark.ray


@pytest.mark.slow
def test_short_run_learns_held_out_exact_match(ray_cluster, supervised_run):
    # 60 steps of 64 problems; the held-out problems are operand pairs never trained on.
    _, summary = supervised_run(
        sft, "learn", "sft.max_steps=60", "sft.val_period=60", "checkpointing.enabled=false"
    )
    (step0, start), (step60, end) = [(st, m["accuracy"]) for st, m in summary.validation]
    assert (step0, step60) == (0, 60)
    assert start <= 0.02 and end >= 0.3, summary.validation  # from ~0 to far above chance
    loss = summary.curves["loss"]
    assert sum(loss[-5:]) / 5 < 0.5 * sum(loss[:5]) / 5, (loss[:5], loss[-5:])
