"""PPO end to end on real Ray actors (policy, generation and value workers): a short run learns
(reward up, value loss down) and resume continues exactly."""

import json
import shutil
from pathlib import Path

import pytest

from nemo_rl.algorithms.ppo import MasterConfig, ppo_train, setup, teardown
from nemo_rl.utils.config import load_config

pytestmark = pytest.mark.ray


def _config(log_dir: Path, *overrides: str) -> MasterConfig:
    return load_config(
        "examples/configs/ppo_tiny.yaml",
        [f"logger.log_dir={log_dir}", "logger.tqdm=false", "telemetry.enabled=false", *overrides],
        MasterConfig,
    )


def _run(cfg: MasterConfig) -> dict:
    s = setup(cfg)
    try:
        result = ppo_train(s)
        return {"curves": result.curves, "start_step": s.start_step}
    finally:
        teardown(s)


def _train_rows(log_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "train/reward_mean" in r}


STEPS = 24
# 24 steps of 64 prompts x 1 response, the critic warmed up for the first 2; a checkpoint after
# every 2nd step (the last two kept), so the resume test can restart from step 22.
LEARN = (
    f"ppo.max_steps={STEPS}",
    "ppo.val_period=0",
    "ppo.val_at_start=false",
    "checkpointing.save_period=2",
)


@pytest.fixture(scope="module")
def learned(ray_cluster, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("ppo_learn")
    return log_dir, _run(_config(log_dir, *LEARN))


def test_short_run_learns_reward_up_value_loss_down(learned):
    log_dir, summary = learned
    rewards, value_loss = summary["curves"]["reward"], summary["curves"]["value_loss"]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.04, (first, last)
    assert sum(value_loss[-5:]) / 5 < 0.2 * sum(value_loss[:3]) / 3, value_loss
    rows = _train_rows(log_dir)
    # The warm-up steps leave the policy alone: no policy-update statistics there.
    assert rows[1]["train/kl"] == 0 and rows[2]["train/kl"] == 0 and rows[STEPS]["train/kl"] > 0
    assert all(-10 < r["train/explained_variance"] <= 1 for r in rows.values())


def test_resume_restores_policy_and_value_model_exactly(learned, tmp_path):
    log_dir, _ = learned
    start = STEPS - 2
    assert (log_dir / "checkpoints" / f"step_{start}" / "value" / "policy.pt").exists()
    shutil.copytree(
        log_dir / "checkpoints" / f"step_{start}", tmp_path / "checkpoints" / f"step_{start}"
    )
    resumed = _run(_config(tmp_path, *LEARN))
    assert resumed["start_step"] == start and len(resumed["curves"]["reward"]) == 2
    a, b = _train_rows(log_dir), _train_rows(tmp_path)
    assert sorted(b) == [start + 1, start + 2]
    for step in b:
        # Same prompts and samples, same policy, value model and both optimisers' states.
        assert b[step]["train/reward_mean"] == a[step]["train/reward_mean"]
        assert b[step]["train/value_loss"] == pytest.approx(a[step]["train/value_loss"], rel=1e-4)
        assert b[step]["train/loss"] == pytest.approx(a[step]["train/loss"], abs=1e-6)
