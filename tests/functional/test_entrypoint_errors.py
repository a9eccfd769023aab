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
        (None, ["grpo.max_stepz=3"], ["grpo.max_stepz: unknown key", "did you mean max_steps"]),
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
