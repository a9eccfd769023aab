"""On-policy distillation end to end on real Ray actors (student, its generation worker, the
teacher): the student's KL to the teacher falls and its held-out accuracy moves toward the
teacher's; resume continues exactly."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from nemo_rl.algorithms.common import make_task
from nemo_rl.algorithms.distillation import MasterConfig, distillation_train, setup, teardown
from nemo_rl.data import right_pad
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm, token_logprobs
from nemo_rl.utils.config import load_config

pytestmark = pytest.mark.ray

TEACHER = ModelConfig(hidden_size=128, intermediate_size=384, num_layers=4)


def supervised_teacher(path: Path, steps: int = 200, seed: int = 42) -> Path:
    """Writes ``path/policy.pt``: the teacher shape trained in-process on the right answers.

    A test fixture, not a loop: a quick way to a teacher that knows the task, so the test can
    see the student move toward it (the example trains its teacher with GRPO instead).
    """
    task = make_task(MasterConfig(), seed)
    tok = task.tokenizer
    model = build_causal_lm(TEACHER, tok.vocab_size, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    prompts = [tok.encode(p.prompt, add_bos=True) for p in task.train]
    answers = [tok.encode(p.answer, add_eos=True) for p in task.train]
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread beats many on a busy machine
    try:
        for _ in range(steps):
            pick = torch.randint(len(prompts), (64,), generator=gen).tolist()
            ids, mask = right_pad([prompts[i] + answers[i] for i in pick], tok.pad_token_id)
            target = torch.zeros_like(mask)  # the answer tokens only
            for row, i in enumerate(pick):
                target[row, len(prompts[i]) : len(prompts[i]) + len(answers[i])] = 1
            loss = -(token_logprobs(model, ids, mask) * target).sum() / target.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict()}, path / "policy.pt")
    return path


def _config(log_dir: Path, *overrides: str) -> MasterConfig:
    return load_config(
        "examples/configs/distillation_tiny.yaml",
        [f"logger.log_dir={log_dir}", "logger.tqdm=false", "telemetry.enabled=false", *overrides],
        MasterConfig,
    )


def _run(cfg: MasterConfig) -> dict:
    s = setup(cfg)
    try:
        result = distillation_train(s)
        return {"curves": result.curves, "validation": result.validation, "start": s.start_step}
    finally:
        teardown(s)


def _train_rows(log_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "train/kl_to_teacher" in r}


STEPS = 30
LEARN = (
    f"distillation.max_steps={STEPS}",
    f"distillation.val_period={STEPS}",
    "checkpointing.save_period=2",
)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return supervised_teacher(tmp_path_factory.mktemp("teacher"))


@pytest.fixture(scope="module")
def distilled(ray_cluster, teacher, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("distill")
    return log_dir, _run(_config(log_dir, f"teacher.checkpoint={teacher}", *LEARN))


def test_kl_to_teacher_falls_and_accuracy_moves_toward_the_teacher(distilled):
    _, summary = distilled
    kl = summary["curves"]["kl_to_teacher"]
    first, last = sum(kl[:3]) / 3, sum(kl[-3:]) / 3
    assert last < 0.5 * first, kl
    (step0, start), (step_n, end) = summary["validation"]
    assert (step0, step_n) == (0, STEPS)
    target = start["teacher_accuracy"]
    assert target >= 0.3, start  # the teacher knows the task
    # The student starts far below the teacher and closes at least a fifth of the gap.
    assert start["accuracy"] < 0.1
    assert end["accuracy"] >= start["accuracy"] + 0.2 * (target - start["accuracy"]), (start, end)


def test_resume_continues_from_the_students_checkpoint_exactly(distilled, teacher, tmp_path):
    log_dir, _ = distilled
    start = STEPS - 2
    shutil.copytree(
        log_dir / "checkpoints" / f"step_{start}", tmp_path / "checkpoints" / f"step_{start}"
    )
    resumed = _run(_config(tmp_path, f"teacher.checkpoint={teacher}", *LEARN))
    assert resumed["start"] == start and len(resumed["curves"]["kl_to_teacher"]) == 2
    a, b = _train_rows(log_dir), _train_rows(tmp_path)
    assert sorted(b) == [start + 1, start + 2]
    for step in b:
        assert b[step]["train/reward_mean"] == a[step]["train/reward_mean"]
        assert b[step]["train/kl_to_teacher"] == pytest.approx(
            a[step]["train/kl_to_teacher"], rel=1e-4
        )
        assert b[step]["train/loss"] == pytest.approx(a[step]["train/loss"], rel=1e-4)
