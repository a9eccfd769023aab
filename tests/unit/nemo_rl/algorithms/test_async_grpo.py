"""Async GRPO: the replay buffer's staleness rule, collating groups of different rollouts, and on
real Ray actors: a short run learns, resume continues, a dead collector fails the run quickly."""

import threading
import time
from pathlib import Path

import pytest
import ray
import torch

from nemo_rl.algorithms.async_grpo import (
    MasterConfig,
    ReplayBuffer,
    TrajectoryGroup,
    async_grpo_train,
    collate,
    setup,
    teardown,
)
from nemo_rl.distributed import WorkerDied
from nemo_rl.utils.config import load_config


def _group(version: int, width: int = 5, g: int = 2) -> TrajectoryGroup:
    ids = torch.arange(g * width).view(g, width) + 1
    ones = torch.ones(g, width, dtype=torch.long)
    return TrajectoryGroup(ids, ones, ones, torch.full((g,), float(version)), 0.5, version, None)


def test_buffer_drops_and_counts_groups_older_than_the_oldest_version_allowed():
    buffer = ReplayBuffer(capacity=10)
    assert buffer.put([_group(0), _group(0), _group(1), _group(2)]) == 8
    groups, dropped, left = buffer.take(1, min_version=1, timeout_s=0.0)
    assert [g.weight_version for g in groups] == [1]
    assert dropped == 4 and left == 2  # two groups of version 0, two trajectories each
    groups, dropped, left = buffer.take(2, min_version=1, timeout_s=0.05)
    assert groups == [] and dropped == 0 and left == 2  # one group is not a batch of two


def test_buffer_take_waits_for_a_put_and_refuses_what_does_not_fit():
    buffer = ReplayBuffer(capacity=4)
    threading.Timer(0.1, buffer.put, [[_group(3), _group(3)]]).start()
    start = time.monotonic()
    groups, _, left = buffer.take(2, min_version=3, timeout_s=5.0)
    assert len(groups) == 2 and left == 0 and time.monotonic() - start < 2.0
    buffer.put([_group(4), _group(4)])
    with pytest.raises(ValueError, match="replay buffer full"):
        buffer.put([_group(4)])


def test_collate_left_pads_groups_of_different_rollouts_to_one_width():
    batch, rewards = collate([_group(0, width=4), _group(1, width=6)], pad_id=0)
    assert batch["input_ids"].shape == (4, 6)
    assert batch["attention_mask"][:2, :2].sum() == 0  # the narrower group is padded on the left
    assert batch["attention_mask"][:2, 2:].all() and batch["attention_mask"][2:].all()
    assert rewards.tolist() == [0.0, 0.0, 1.0, 1.0]


# -- on real Ray ------------------------------------------------------------------------------


def _config(log_dir: Path, *overrides: str) -> MasterConfig:
    return load_config(
        "examples/configs/async_grpo_tiny.yaml",
        [f"logger.log_dir={log_dir}", "logger.tqdm=false", "telemetry.enabled=false", *overrides],
        MasterConfig,
    )


SMALL = (
    "async_grpo.num_prompts_per_step=4",
    "async_grpo.num_generations_per_prompt=4",
    "async_grpo.val_period=0",
    "async_grpo.val_at_start=false",
    "async_grpo.buffer_size=32",
    "policy.train_global_batch_size=16",
    "policy.train_micro_batch_size=16",
    "checkpointing.save_period=2",
)


def _run(cfg: MasterConfig) -> tuple[list[float], int]:
    s = setup(cfg)
    try:
        return async_grpo_train(s).curves.get("reward", []), s.start_step
    finally:
        teardown(s)


@pytest.mark.ray
def test_resume_continues_after_the_checkpoint_with_an_empty_buffer(ray_cluster, tmp_path, capsys):
    rewards, start = _run(_config(tmp_path, "async_grpo.max_steps=2", *SMALL))
    assert start == 0 and len(rewards) == 2
    assert (tmp_path / "checkpoints" / "step_2" / "trainer_state.json").exists()
    capsys.readouterr()
    rewards, start = _run(_config(tmp_path, "async_grpo.max_steps=4", *SMALL))
    assert start == 2 and len(rewards) == 2  # only the remaining steps
    assert "the replay buffer starts empty" in capsys.readouterr().out


@pytest.mark.ray
def test_a_collector_that_dies_mid_run_fails_the_trainer_naming_it(ray_cluster, tmp_path):
    cfg = _config(tmp_path, "async_grpo.max_steps=200", "checkpointing.enabled=false", *SMALL)
    s = setup(cfg)
    try:
        collector = s.collector
        threading.Timer(3.0, ray.kill, [collector]).start()
        start = time.monotonic()
        with pytest.raises(WorkerDied, match="trajectory collector"):
            async_grpo_train(s)
        assert time.monotonic() - start < 60  # bounded: not a hang until max_steps or a timeout
    finally:
        teardown(s)


@pytest.mark.ray
@pytest.mark.slow
def test_short_run_learns(ray_cluster, tmp_path):
    # 30 steps of 16 prompts x 8 samples, sampled one version ahead: about 80 s on 2 cores.
    rewards, _ = _run(
        _config(
            tmp_path,
            "async_grpo.max_steps=30",
            "async_grpo.num_prompts_per_step=16",
            "async_grpo.val_period=0",
            "async_grpo.val_at_start=false",
            "policy.lr=2e-3",
            "checkpointing.enabled=false",
        )
    )
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.08, (first, last, rewards)
