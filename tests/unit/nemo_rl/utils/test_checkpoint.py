import random

import torch

from nemo_rl.utils.checkpoint import CheckpointManager, get_rng_state, set_rng_state


def test_finished_checkpoints_are_listed_and_pruned(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep=2)
    assert ckpt.latest() is None
    for step in (2, 4, 6):
        tmp = ckpt.begin(step)
        (tmp_path / f"tmp_step_{step}" / "policy.pt").write_bytes(b"x")
        ckpt.finish(tmp, step, {"step": step})
    ckpt.begin(8)  # started, never finished: must not count
    assert ckpt.latest() == str(tmp_path / "step_6")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_4", "step_6", "tmp_step_8"]
    assert CheckpointManager.load_trainer_state(ckpt.latest()) == {"step": 6}


def test_rng_state_round_trip():
    state = get_rng_state()
    a = (random.random(), torch.rand(2))
    set_rng_state(state)
    b = (random.random(), torch.rand(2))
    assert a[0] == b[0] and torch.equal(a[1], b[1])
