"""The driver's straggler watch: one line when a rank becomes the straggler, again only on change."""

from __future__ import annotations

from nemo_rl.models.policy.worker import TrainStats
from nemo_rl.telemetry.stragglers import StragglerWatch


def _name(rank: int) -> str:
    return f"policy rank {rank} (node 3f2a9c01, pid {4710 + rank})"


def test_one_line_when_a_rank_lags_and_one_when_it_stops():
    printed: list[str] = []
    watch = StragglerWatch(0.1, window=4, out=printed.append)
    for _ in range(4):
        watch.observe("policy", "rl.worker.train_microbatch", [1.0, 2.0], _name)
    assert printed == [
        "straggler: policy rank 1 (node 3f2a9c01, pid 4711) is 33% slower than the median in "
        "rl.worker.train_microbatch, the slowest in 2 of the last 2 steps "
        "(telemetry.straggler_threshold 0.1)"
    ]
    for _ in range(4):
        watch.observe("policy", "rl.worker.train_microbatch", [1.0, 1.0], _name)
    assert printed[1:] == [
        "straggler: none any more in policy rl.worker.train_microbatch "
        "(telemetry.straggler_threshold 0.1)"
    ]
    watch.observe("policy", "rl.worker.logprob", [5.0], _name)  # one rank: nothing to compare
    assert len(printed) == 2


def test_the_ranks_flops_and_the_wait_lost_to_the_slowest_merge_into_the_step():
    ranks = [
        TrainStats({"loss": 1.0}, 2.0, flops=10.0, busy_s=1.0, wait_s=0.5, elapsed_s=2.0),
        TrainStats({"loss": 1.0}, 2.0, flops=10.0, busy_s=1.4, wait_s=0.1, elapsed_s=2.0),
    ]
    metrics = TrainStats.merge(ranks)
    assert metrics["flops"] == 20.0 and metrics["flops_per_sec"] == 10.0
    assert abs(metrics["rank_wait_s"] - 0.4) < 1e-9  # rank 0 waited 0.4 s more than rank 1
