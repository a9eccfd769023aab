"""Bad input to examples/run_ppo.py and examples/run_distillation.py: one message naming the key
or path, exit code 2, no traceback, and nothing trained (no metrics written)."""

import pytest

from tests.traces import run_example


def _fails_cleanly(proc, log_dir, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)
    assert not (log_dir / "metrics.jsonl").exists()  # failed before training


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("ppo.gamma=1.5", ["ppo.gamma", "less than or equal to 1", "1.5"]),
        ("ppo.lam=-0.1", ["ppo.lam", "greater than or equal to 0"]),
        ("value.head=lm", ["value", "head: scalar"]),
    ],
)
def test_ppo_bad_coefficients_exit_2_naming_the_key(tmp_path, override, words):
    proc = run_example(
        "run_ppo.py", override, f"logger.log_dir={tmp_path}", timeout=120, check=False
    )
    _fails_cleanly(proc, tmp_path, *words)


def _teacher_file(tmp_path, vocab_size: int | None = None, content: bytes | None = None):
    path = tmp_path / "teacher" / "policy.pt"
    path.parent.mkdir()
    if content is not None:
        path.write_bytes(content)
    else:
        import torch

        from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm

        model = build_causal_lm(ModelConfig(), vocab_size, 0)
        torch.save({"model": model.state_dict()}, path)
    return path


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p / "no" / "such" / "teacher", ["no policy checkpoint there"]),
        (lambda p: _teacher_file(p, content=b"not a checkpoint"), ["cannot read it"]),
        (lambda p: _teacher_file(p, vocab_size=40), ["vocabulary has 40 tokens", "must match"]),
    ],
    ids=["missing", "unreadable", "vocab_mismatch"],
)
def test_distillation_bad_teacher_exits_2_naming_key_and_path(tmp_path, make, words):
    teacher = make(tmp_path)
    log_dir = tmp_path / "run"
    proc = run_example(
        "run_distillation.py",
        f"teacher.checkpoint={teacher}",
        f"logger.log_dir={log_dir}",
        check=False,
    )
    _fails_cleanly(proc, log_dir, "teacher.checkpoint", str(teacher), *words)
    assert "GRPO trains the teacher" not in proc.stdout  # a given teacher is never replaced
