"""The driver's straggler watch: one line when a rank becomes the straggler, again only on change."""

from __future__ import annotations

from nemo_rl.models.policy.worker import TrainStats
from nemo_rl.telemetry.stragglers import StragglerWatch
from nemo_rl.utils.timer import Timer, current_step


def _name(rank: int) -> str:
    return f"policy rank {rank} (node 3f2a9c01, pid {4710 + rank})"


def test_one_line_when_a_rank_lags_and_one_when_it_stops():
    printed: list[str] = []
    watch = StragglerWatch(0.1, window=4, out=printed.append)
    for step in range(1, 5):
        watch.observe("policy", "rl.worker.train_microbatch", [1.0, 2.0], _name, step=step)
    assert printed == [
        "straggler: policy rank 1 (node 3f2a9c01, pid 4711) is 33% slower than the median in "
        "rl.worker.train_microbatch at step 2, the slowest in 2 of the last 2 steps "
        "(telemetry.straggler_threshold 0.1)"
    ]
    for step in range(5, 9):
        watch.observe("policy", "rl.worker.train_microbatch", [1.0, 1.0], _name, step=step)
    assert printed[1:] == [
        "straggler: none any more in policy rl.worker.train_microbatch at step 7 "
        "(telemetry.straggler_threshold 0.1)"
    ]
    watch.observe("policy", "rl.worker.logprob", [5.0], _name)  # one rank: nothing to compare
    assert len(printed) == 2


def test_the_line_names_the_step_of_the_loop_phase_around_the_call():
    printed: list[str] = []
    watch = StragglerWatch(0.1, window=4, out=printed.append)
    timer = Timer()
    for step in range(1, 3):  # as a loop numbers its steps, and passes the number to its spans
        with timer.span("rl.grpo.step", **{"rl.iteration": step}):
            with timer.span("rl.grpo.policy_update", **{"rl.iteration": step}):
                watch.observe("policy", "rl.worker.train_microbatch", [1.0, 2.0], _name)
    (line,) = printed
    assert "in rl.worker.train_microbatch at step 2, the slowest in 2 of the last 2 steps" in line
    assert current_step() is None  # outside every step again
    for _ in range(3):
        watch.observe("policy", "rl.worker.train_microbatch", [1.0, 1.0], _name)
    # outside any step (no loop around the call): the line says no step
    assert printed[1:] == [
        "straggler: none any more in policy rl.worker.train_microbatch "
        "(telemetry.straggler_threshold 0.1)"
    ]


def test_the_ranks_flops_and_the_wait_lost_to_the_slowest_merge_into_the_step():
    ranks = [
        TrainStats({"loss": 1.0}, 2.0, flops=10.0, busy_s=1.0, wait_s=0.5, elapsed_s=2.0),
        TrainStats({"loss": 1.0}, 2.0, flops=10.0, busy_s=1.4, wait_s=0.1, elapsed_s=2.0),
    ]
    metrics = TrainStats.merge(ranks)
    assert metrics["flops"] == 20.0 and metrics["flops_per_sec"] == 10.0
    assert abs(metrics["rank_wait_s"] - 0.4) < 1e-9  # rank 0 waited 0.4 s more than rank 1
