"""Bad input to an example entry point: one message, exit code 2, no traceback, nothing started."""

import subprocess
import sys

import pytest

EXAMPLE = "examples/run_grpo.py"


def _run(tmp_path, *args, env=None):
    import os

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, EXAMPLE, *args, f"logger.log_dir={tmp_path}/run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


@pytest.mark.parametrize(
    ("content", "args", "words"),
    [
        (None, ["grpo.max_stepz=3"], ["grpo.max_stepz: unknown key", "did you mean 'max_steps'"]),
        (None, ["grpo.max_steps=0"], ["grpo.max_steps", "greater than or equal to 1"]),
        (None, ["grpo.max_steps"], ["key=value"]),
        ("grpo:\n  max_steps: [1\n", [], [":3:1: invalid YAML"]),
        ("grpo:\n  max_steps: ${nope.x}\n", [], ["grpo.max_steps", "nope.x"]),
        ("- a\n- b\n", [], ["a mapping of sections, not list"]),
        ("missing", [], ["no such config file"]),
    ],
)
def test_bad_config_is_one_message_and_exit_2(tmp_path, content, args, words):
    config = tmp_path / "cfg.yaml"
    if content is not None and content != "missing":
        config.write_text(content)
    extra = [] if content is None else ["--config", str(config)]
    r = _run(tmp_path, *extra, *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr
    assert not (tmp_path / "run").exists()  # failed before anything was written


@pytest.mark.parametrize(
    ("example", "args", "words"),
    [
        (
            "run_async_grpo.py",
            ["async_grpo.max_trajectory_age_steps=-1"],
            ["async_grpo.max_trajectory_age_steps", "greater than or equal to 0"],
        ),
        (
            "run_async_grpo.py",
            ["async_grpo.buffer_size=100"],
            ["async_grpo.buffer_size: ", "100 is smaller than one step's batch", "at least 256"],
        ),
        (
            "run_async_grpo.py",
            ["async_grpo.max_trajectory_age=2"],
            [
                "async_grpo.max_trajectory_age: unknown key",
                "did you mean 'max_trajectory_age_steps'",
            ],
        ),
        (
            "run_sft.py",
            ["sft.max_stepz=3"],
            ["sft.max_stepz: unknown key", "did you mean 'max_steps'"],
        ),
        (
            "run_sft.py",
            ["sft.batch_size=many"],
            ["sft.batch_size", "expected an integer", "'many'"],
        ),
        ("run_sft.py", ["sft.batch_size=441"], ["sft.batch_size=441 is more than the 440"]),
        ("run_dpo.py", ["dpo.bta=0.1"], ["dpo.bta: unknown key", "did you mean 'beta'"]),
        ("run_dpo.py", ["dpo.beta=0"], ["dpo.beta", "greater than 0"]),
        ("run_dpo.py", ["dpo.beta=-1.5"], ["dpo.beta", "greater than 0", "-1.5"]),
        ("run_dpo.py", ["dpo.val_at_start=maybe"], ["dpo.val_at_start", "expected a boolean"]),
        ("run_dpo.py", ["dpo.batch_size=881"], ["dpo.batch_size=881 is more than the 880"]),
        ("run_rm.py", ["rm.seeed=1"], ["rm.seeed: unknown key", "did you mean 'seed'"]),
        ("run_rm.py", ["rm.max_steps=[1]"], ["rm.max_steps", "expected an integer"]),
        ("run_rm.py", ["rm.batch_size=900"], ["rm.batch_size=900 is more than the 880"]),
        ("run_rm.py", ["policy.head=lm"], ["a reward model needs policy.head=scalar"]),
    ],
)
def test_bad_loop_config_is_one_message_and_exit_2(tmp_path, example, args, words):
    r = subprocess.run(
        [sys.executable, f"examples/{example}", *args, f"logger.log_dir={tmp_path}/run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: ")
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()  # failed before Ray or the logger started
