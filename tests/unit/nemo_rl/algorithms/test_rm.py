"""Reward model on real Ray actors: a short run ranks held-out pairs above chance, and the
trained model loads back by path."""

import pytest

from nemo_rl.algorithms import rm
from nemo_rl.data import encode_preference_pairs, stack_pair_sides
from nemo_rl.models.causal_lm import last_token_values
from nemo_rl.models.policy import PolicyWorker

pytestmark = pytest.mark.ray


@pytest.mark.slow
def test_short_run_ranks_held_out_pairs_and_loads_by_path(ray_cluster, supervised_run, tmp_path):
    s, summary = supervised_run(rm, "learn", "rm.max_steps=60", "rm.val_period=60")
    (step0, start), (step60, end) = summary.validation
    assert (step0, step60) == (0, 60)
    assert 0.3 <= start["accuracy"] <= 0.7, start  # a random scalar head: about chance
    assert end["accuracy"] >= 0.65 and end["accuracy"] >= start["accuracy"] + 0.1, end

    # The last checkpoint is the trained reward model: loaded by path it ranks alike.
    path = tmp_path / "learn" / "checkpoints" / "step_60"
    policy = s.cfg.policy.model_copy(update={"checkpoint": str(path)})
    model = PolicyWorker(policy, s.task.tokenizer.vocab_size, seed=0, reference=False)
    both = stack_pair_sides(encode_preference_pairs(s.task.tokenizer, s.val_data))
    chosen, rejected = last_token_values(model.get_values(both), both["attention_mask"]).chunk(2)
    assert float((chosen > rejected).float().mean()) == pytest.approx(end["accuracy"], abs=1e-6)


def test_config_needs_a_scalar_head():
    with pytest.raises(ValueError, match=r"a reward model needs policy\.head=scalar"):
        rm.MasterConfig.model_validate({"policy": {"head": "lm"}})
    assert rm.MasterConfig().policy.head == "scalar"
