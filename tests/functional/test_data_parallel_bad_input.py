"""Bad rank settings: one line naming the keys, exit code 2, before Ray or any worker starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.traces import ROOT, clean_env


def _run(example: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"examples/{example}", *args, f"logger.log_dir={tmp_path}/run"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("example", "args", "words"),
    [
        ("run_grpo.py", ["policy.num_workers=0"], ["policy.num_workers", "1"]),
        ("run_grpo.py", ["generation.num_workers=-1"], ["generation.num_workers", "1"]),
        ("run_ppo.py", ["value.num_workers=0"], ["value.num_workers", "1"]),
        (
            "run_grpo.py",
            ["policy.num_workers=3"],
            [
                "policy.num_workers=3 does not divide grpo.num_prompts_per_step x "
                "grpo.num_generations_per_prompt=256"
            ],
        ),
        (
            "run_grpo.py",
            ["policy.num_workers=2", "policy.train_global_batch_size=5", "cluster.num_cpus=8"],
            ["policy.num_workers=2 does not divide policy.train_global_batch_size=5"],
        ),
        (
            "run_grpo.py",
            ["generation.num_workers=3", "cluster.num_cpus=8"],
            ["generation.num_workers=3 does not divide grpo.num_prompts_per_step=32"],
        ),
        (
            "run_sft.py",
            ["policy.num_workers=3", "cluster.num_cpus=8"],
            ["policy.num_workers=3 does not divide sft.batch_size=64"],
        ),
        (
            "run_grpo.py",
            ["policy.num_workers=2", "generation.num_workers=2"],
            [
                "cluster.num_cpus=4 cannot place the run's 4 ranks (policy.num_workers=2 + "
                "generation.num_workers=2) of cluster.worker_num_cpus=2 CPUs each",
                "8 CPUs",
            ],
        ),
        (
            "run_async_grpo.py",
            ["policy.num_workers=2", "generation.num_workers=2"],
            ["the trajectory collector=1", "5 ranks"],
        ),
    ],
)
def test_a_bad_rank_setting_is_one_line_and_exit_2(example, args, words, tmp_path):
    done = _run(example, tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: invalid config: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


@pytest.mark.parametrize("via", ["cluster.address", "RAY_ADDRESS"])
def test_a_cluster_address_where_nothing_answers_is_one_line_and_exit_2(via, tmp_path):
    from nemo_rl.distributed import free_port

    address = f"127.0.0.1:{free_port()}"  # a port nothing listens on
    args = [f"cluster.address={address}"] if via == "cluster.address" else []
    env = {**clean_env(), "RAY_ADDRESS": address} if via == "RAY_ADDRESS" else clean_env()
    done = subprocess.run(
        [sys.executable, "examples/run_grpo.py", *args, f"logger.log_dir={tmp_path}/run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # ray.init alone would retry for minutes
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"error: invalid config: {via}={address}: nothing answers at {address}: "
    )
    assert "ray start --head" in lines[0]
    assert not done.stdout and not (tmp_path / "run").exists()  # checked before anything starts
