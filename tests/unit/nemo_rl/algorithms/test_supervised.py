"""What SFT, DPO and RM share: resume continues where the checkpoint left off, exactly, and a
batch larger than the data is a config error."""

import json
from pathlib import Path

import pytest

from nemo_rl.algorithms import dpo, rm, sft
from nemo_rl.utils.config import ConfigError, validate_config

LOOPS = {"sft": sft, "dpo": dpo, "rm": rm}


def _train_rows(log_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "train/loss" in r}


@pytest.mark.ray
@pytest.mark.parametrize("algo", sorted(LOOPS))
def test_resume_continues_step_count_and_data_order_exactly(
    algo, ray_cluster, supervised_run, tmp_path, capsys, spans
):
    module = LOOPS[algo]
    small = (
        f"{algo}.batch_size=8",
        f"{algo}.val_period=0",
        f"{algo}.val_at_start=false",
        "checkpointing.save_period=2",
    )
    straight, _ = supervised_run(module, "straight", f"{algo}.max_steps=4", *small)
    first, summary = supervised_run(module, "resumed", f"{algo}.max_steps=2", *small)
    assert first.start_step == 0 and len(summary.curves["loss"]) == 2
    capsys.readouterr()
    second, summary = supervised_run(module, "resumed", f"{algo}.max_steps=4", *small)
    assert "steps 1-2 of 4 are done, training continues at step 3" in capsys.readouterr().out
    assert second.start_step == 2 and len(summary.curves["loss"]) == 2  # only the rest
    (loaded,) = spans.named(f"rl.{algo}.load_checkpoint")
    assert loaded.attributes["rl.checkpoint.step"] == 2
    assert loaded.attributes["rl.checkpoint.path"].endswith("resumed/checkpoints/step_2")
    assert second.train_data.state_dict() == straight.train_data.state_dict()
    a, b = _train_rows(tmp_path / "straight"), _train_rows(tmp_path / "resumed")
    assert sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):  # same examples, same weights and optimiser state
        assert b[step]["train/loss"] == pytest.approx(a[step]["train/loss"], abs=1e-6)
        assert b[step]["train/grad_norm"] == pytest.approx(a[step]["train/grad_norm"], rel=1e-5)

    capsys.readouterr()
    third, summary = supervised_run(module, "resumed", f"{algo}.max_steps=4", *small)
    assert third.start_step == 4 and summary.curves == {}
    assert f"{algo}.max_steps=4, so there is nothing to train" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("algo", "section", "available"),
    [
        ("sft", {}, 440),
        ("dpo", {"pairs_per_problem": 2}, 880),
        ("rm", {"pairs_per_problem": 1}, 440),
    ],
)
def test_a_batch_larger_than_the_data_is_a_config_error(algo, section, available):
    model = LOOPS[algo].MasterConfig
    validate_config({algo: {**section, "batch_size": available}}, model)  # all of it is fine
    with pytest.raises(ConfigError) as e:
        validate_config({algo: {**section, "batch_size": available + 1}}, model)
    assert f"{algo}.batch_size={available + 1} is more than the {available} " in str(e.value)
