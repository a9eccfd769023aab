"""Every role as N ranks, for real: the examples run with 2 ranks per trained role and 2
generation ranks (subprocesses, real Ray, torch.distributed over gloo, the file exporter), and
their traces show every rank under the driver's phase, with the gradient all-reduce as a span."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.traces import ROOT, clean_env, live_check, metric_points, read_spans, run_example

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TWO_RANKS = (
    "policy.num_workers=2",
    "generation.num_workers=2",
    "cluster.num_cpus=4",
    "cluster.worker_num_cpus=1",
    "logger.tqdm=false",
    "telemetry.exporter=file",
)


def _traces_by_step(spans: list[dict], step_name: str) -> dict[int, list[dict]]:
    steps = {s["traceId"]: s["attrs"]["rl.iteration"] for s in spans if s["name"] == step_name}
    out: dict[int, list[dict]] = defaultdict(list)
    for s in spans:
        if s["traceId"] in steps:
            out[steps[s["traceId"]]].append(s)
    return out


def _ranks(spans: list[dict], name: str) -> set[tuple[str, int, int]]:
    """(group, rank, pid) of every process that emitted ``name``."""
    return {
        (
            s["resource"]["rl.worker.group"],
            s["resource"]["rl.worker.rank"],
            s["resource"]["process.pid"],
        )
        for s in spans
        if s["name"] == name
    }


def _train_rows(log_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "train/loss" in r]


@pytest.fixture(scope="module")
def grpo(tmp_path_factory):
    """A GRPO run with 2 policy and 2 generation ranks, long enough to learn (the recipe of the
    one-rank learning test), every rank exporting."""
    log_dir = tmp_path_factory.mktemp("grpo_dp")
    proc = run_example(
        "run_grpo.py",
        *TWO_RANKS,
        f"logger.log_dir={log_dir}",
        "grpo.max_steps=40",
        "grpo.val_period=40",
        "checkpointing.enabled=false",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=all_ranks",
        timeout=900,
    )
    return log_dir, proc.stdout, read_spans(log_dir / "telemetry" / "traces.jsonl")


def test_grpo_with_two_ranks_learns(grpo):
    log_dir, out, _ = grpo
    rows = _train_rows(log_dir)
    assert len(rows) == 40
    rewards = [r["train/reward_mean"] for r in rows]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.1, (first, last)  # the margin of the one-rank test
    assert "validation accuracy: step 0 0.000, step 40 " in out


def test_every_step_holds_both_ranks_and_the_all_reduce(grpo):
    _, out, spans = grpo
    by_step = _traces_by_step(spans, "rl.grpo.step")
    assert sorted(by_step) == list(range(1, 41))
    for step, trace in by_step.items():
        by_id = {s["spanId"]: s for s in trace}
        train = _ranks(trace, "rl.worker.train_microbatch")
        assert {(g, r) for g, r, _ in train} == {("policy", 0), ("policy", 1)}, step
        assert len({pid for *_, pid in train}) == 2  # two processes
        generate = _ranks(trace, "rl.worker.generate")
        assert {(g, r) for g, r, _ in generate} == {("generation", 0), ("generation", 1)}
        assert len({pid for *_, pid in generate}) == 2
        reduces = [s for s in trace if s["name"] == "rl.worker.allreduce"]
        assert {s["resource"]["rl.worker.rank"] for s in reduces} == {0, 1}
        for s in reduces:  # each rank's collective sits under the driver's update phase
            assert by_id[s["parentSpanId"]]["name"] == "rl.grpo.policy_update"
            assert s["attrs"]["rl.collective.num_bytes"] > 1_000_000
        update = next(s for s in trace if s["name"] == "rl.grpo.policy_update")
        assert update["attrs"]["rl.num_micro_batches"] >= 1
    # every rank's resource says who it is
    resources = {
        (s["resource"]["rl.worker.group"], s["resource"]["rl.worker.rank"]): s["resource"]
        for s in spans
    }
    for group in ("policy", "generation"):
        for rank in (0, 1):
            r = resources[(group, rank)]
            assert r["rl.worker.world_size"] == 2 and r["rl.worker.local_rank"] == rank
            assert r["rl.worker.node"]
    # the breakdown names the slowest rank of each worker row
    assert "rl.worker.allreduce" in out and "(mean of 2 ranks)" in out


def test_both_groups_of_two_ranks_feed_the_straggler_watch(grpo):
    """rl.rank.skew (slowest rank over the median) per group and phase, from the live watch."""
    log_dir, _, _ = grpo
    points = metric_points(log_dir / "telemetry" / "metrics.jsonl")["rl.rank.skew"]
    seen = {(p["attrs"]["rl.worker.group"], p["attrs"]["rl.phase"]) for p in points}
    assert seen == {
        ("policy", "rl.worker.train_microbatch"),
        ("policy", "rl.worker.logprob"),
        ("generation", "rl.worker.generate"),
    }, seen


def test_the_two_rank_run_is_clean_under_live_check(grpo):
    log_dir, _, _ = grpo
    live_check(log_dir / "telemetry")


@pytest.fixture(scope="module")
def single_rank(tmp_path_factory):
    """Two GRPO steps with 2 policy and 2 generation ranks, rank 0 of each group exporting; its
    step-2 checkpoint is also the teacher of the two-rank distillation run (no run of its own)."""
    log_dir = tmp_path_factory.mktemp("grpo_single_rank")
    run_example(
        "run_grpo.py",
        *TWO_RANKS,
        f"logger.log_dir={log_dir}",
        "grpo.max_steps=2",
        "grpo.num_prompts_per_step=8",
        "grpo.val_at_start=false",
        "checkpointing.save_period=2",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=single_rank",
    )
    return log_dir


def test_single_rank_exports_rank_zero_of_each_group(single_rank):
    spans = read_spans(single_rank / "telemetry" / "traces.jsonl")
    workers = {(s["resource"]["rl.worker.group"], s["resource"]["rl.worker.rank"]) for s in spans}
    assert workers == {("driver", 0), ("policy", 0), ("generation", 0)}


def test_sft_with_two_ranks_logs_what_one_rank_does(tmp_path):
    common = (
        "sft.max_steps=4",
        "sft.batch_size=16",
        "sft.val_at_start=false",
        "sft.val_period=0",
        "policy.train_global_batch_size=8",
        "policy.train_micro_batch_size=4",
        "checkpointing.enabled=false",
        "logger.tqdm=false",
        "telemetry.enabled=false",
        "cluster.worker_num_cpus=1",
    )
    run_example("run_sft.py", *common, f"logger.log_dir={tmp_path / 'one'}")
    run_example(
        "run_sft.py",
        *common,
        f"logger.log_dir={tmp_path / 'two'}",
        "policy.num_workers=2",
        "generation.num_workers=2",
    )
    one, two = _train_rows(tmp_path / "one"), _train_rows(tmp_path / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3, 4]
    for a, b in zip(one, two, strict=True):
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-3)
        assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-3)
        assert b["train/num_tokens"] == a["train/num_tokens"]


# Every other loop, three steps with two ranks per trained role and two generation ranks.
OTHER_LOOPS = {
    "run_async_grpo.py": (
        "rl.async_grpo.step",
        [
            "async_grpo.max_steps=3",
            "async_grpo.num_prompts_per_step=8",
            "async_grpo.val_at_start=false",
            "cluster.num_cpus=5",  # and the collector
        ],
        {"policy": 2, "generation": 2, "collector": 1},
    ),
    "run_ppo.py": (
        "rl.ppo.step",
        [
            "ppo.max_steps=3",
            "ppo.num_prompts_per_step=16",
            "ppo.val_at_start=false",
            "ppo.critic_warmup_steps=0",  # every step trains both roles
            "value.num_workers=2",
            "cluster.num_cpus=6",
        ],
        {"policy": 2, "value": 2, "generation": 2},
    ),
    "run_dpo.py": (
        "rl.dpo.step",
        ["dpo.max_steps=3", "dpo.batch_size=16", "dpo.val_at_start=false"],
        {"policy": 2},
    ),
    "run_rm.py": (
        "rl.rm.step",
        ["rm.max_steps=3", "rm.batch_size=16", "rm.val_at_start=false"],
        {"policy": 2},
    ),
}


@pytest.mark.parametrize("script", sorted(OTHER_LOOPS))
def test_every_loop_runs_with_two_ranks(script, tmp_path):
    step_name, overrides, groups = OTHER_LOOPS[script]
    base = [
        a
        for a in TWO_RANKS
        if not (script in ("run_dpo.py", "run_rm.py") and a.startswith("generation."))
    ]
    run_example(
        script,
        *base,
        *overrides,
        f"logger.log_dir={tmp_path}",
        "checkpointing.enabled=false",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=all_ranks",
    )
    spans = read_spans(tmp_path / "telemetry" / "traces.jsonl")
    seen = defaultdict(set)
    for s in spans:
        seen[s["resource"]["rl.worker.group"]].add(s["resource"]["rl.worker.rank"])
    for group, ranks in groups.items():
        assert seen[group] == set(range(ranks)), (group, dict(seen))
    by_step = _traces_by_step(spans, step_name)
    assert sorted(by_step) == [1, 2, 3]
    for trace in by_step.values():
        reduces = {
            s["resource"]["rl.worker.group"] for s in trace if s["name"] == "rl.worker.allreduce"
        }
        trained = {g for g in groups if g in ("policy", "value")}
        assert reduces == trained
    live_check(tmp_path / "telemetry")


def test_distillation_runs_with_two_ranks(single_rank, tmp_path):
    run_example(
        "run_distillation.py",
        *TWO_RANKS,
        f"logger.log_dir={tmp_path / 'run'}",
        f"teacher.checkpoint={single_rank / 'checkpoints' / 'step_2'}",
        "teacher.num_workers=2",
        "distillation.max_steps=3",
        "distillation.num_prompts_per_step=16",
        "distillation.val_at_start=false",
        "checkpointing.enabled=false",
        "cluster.num_cpus=6",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=all_ranks",
    )
    spans = read_spans(tmp_path / "run" / "telemetry" / "traces.jsonl")
    by_step = _traces_by_step(spans, "rl.distillation.step")
    assert sorted(by_step) == [1, 2, 3]
    for trace in by_step.values():
        teachers = {
            s["resource"]["rl.worker.rank"]
            for s in trace
            if s["resource"].get("rl.worker.group") == "teacher"
        }
        assert teachers == {0, 1}


def test_a_killed_rank_fails_the_run_within_a_minute_naming_it(tmp_path):
    cmd = [
        sys.executable,
        "examples/run_grpo.py",
        *TWO_RANKS,
        f"logger.log_dir={tmp_path}",
        "grpo.max_steps=200",
        "grpo.num_prompts_per_step=8",
        "grpo.val_at_start=false",
        "checkpointing.enabled=false",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=all_ranks",
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        trace = tmp_path / "telemetry" / "traces.jsonl"
        deadline = time.monotonic() + 240
        victim = None
        while victim is None and time.monotonic() < deadline:  # a policy rank 1 that has trained
            time.sleep(1)
            if trace.exists():
                for s in read_spans(trace):
                    r = s["resource"]
                    if s["name"] == "rl.worker.train_microbatch" and r.get("rl.worker.rank") == 1:
                        victim = r["process.pid"]
                        break
        assert victim is not None, "policy rank 1 never trained"
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    assert took < 60, took
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "policy rank 1 (node " in line and f"pid {victim})" in line and "died" in line, line
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A real two-node Ray cluster on this machine (two raylets on 127.0.0.1, 2 CPUs each),
    which a run joins through ``cluster.address``."""
    from ray.cluster_utils import Cluster

    saved = os.environ.get("RAY_TMPDIR")
    # Its own temp folder: a plain ray.init() elsewhere on the machine must not join it. Short
    # (Ray's socket paths have at most 107 bytes) and out of the environment whatever happens.
    ray_tmp = tempfile.mkdtemp(prefix="rn", dir="/tmp")
    os.environ["RAY_TMPDIR"] = ray_tmp
    try:
        common = {
            "num_cpus": 2,
            "node_ip_address": "127.0.0.1",
            "object_store_memory": 100 * 2**20,
        }
        cluster = Cluster(
            initialize_head=True, head_node_args={**common, "include_dashboard": False}
        )
        try:
            cluster.add_node(**common)
            cluster.wait_for_nodes()
            from nemo_rl.distributed import unreachable

            if why := unreachable(cluster.address):
                # Ray dials 127.0.0.1 at the machine's network address; scripts/test.sh runs the
                # tests in a loopback-only namespace, where that address is 127.0.0.1.
                pytest.skip(
                    f"a run cannot join a loopback-only cluster outside a network namespace: {why}"
                )
            yield cluster
        finally:
            cluster.shutdown()
    finally:
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_policy_ranks_spread_over_two_nodes_each_exporting(two_nodes, tmp_path):
    run_example(
        "run_grpo.py",
        "policy.num_workers=2",
        "generation.num_workers=2",
        "cluster.worker_num_cpus=1",
        f"cluster.address={two_nodes.address}",
        "cluster.placement=spread",
        f"logger.log_dir={tmp_path}",
        "logger.tqdm=false",
        "grpo.max_steps=2",
        "grpo.num_prompts_per_step=8",
        "grpo.val_at_start=false",
        "checkpointing.enabled=false",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=first_rank_per_node",
    )
    spans = read_spans(tmp_path / "telemetry" / "traces.jsonl")
    policy = {
        s["resource"]["rl.worker.rank"]: s["resource"]
        for s in spans
        if s["resource"].get("rl.worker.group") == "policy"
    }
    assert sorted(policy) == [0, 1]  # both exported: each is the first policy rank on its node
    assert policy[0]["rl.worker.node"] != policy[1]["rl.worker.node"]
    assert policy[0]["rl.worker.local_rank"] == policy[1]["rl.worker.local_rank"] == 0
    nodes = {two_nodes.head_node.node_id, *(n.node_id for n in two_nodes.worker_nodes)}
    assert {policy[0]["rl.worker.node"], policy[1]["rl.worker.node"]} == nodes


def test_a_joined_cluster_too_small_is_one_line_and_exit_2(two_nodes, tmp_path):
    done = run_example(
        "run_grpo.py",
        "policy.num_workers=4",
        "generation.num_workers=2",
        "cluster.worker_num_cpus=1",
        f"cluster.address={two_nodes.address}",
        f"logger.log_dir={tmp_path}",
        "telemetry.enabled=false",
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "the Ray cluster at cluster.address, with 4 CPUs, cannot place the run's 6 ranks" in line
    assert "Traceback" not in done.stderr
