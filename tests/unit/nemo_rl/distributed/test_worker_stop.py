"""A worker stopped by SIGTERM while the driver keeps calling it reads as stopped, never as a
crash: Ray's own handler raises wherever the signal lands, and landing between two tasks
crashes the worker (most of the time, for a busy actor, without init_worker's guard)."""

import os
import random
import signal
import threading

import pytest
import ray

from nemo_rl.distributed.worker import init_worker
from nemo_rl.distributed.worker_group import RankInfo

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0.5)
class Busy:
    def __init__(self) -> None:
        init_worker(RankInfo.alone("policy"))

    def pid(self) -> int:
        return os.getpid()

    def step(self, n: int) -> list[int]:
        return [sum(range(n))] * 64


def test_sigterm_to_a_busy_worker_is_always_a_stop(ray_cluster):
    rng = random.Random(0)
    workers = [Busy.remote() for _ in range(5)]  # started together: each imports torch
    causes = []
    for worker, pid in zip(workers, ray.get([w.pid.remote() for w in workers]), strict=True):
        threading.Timer(rng.uniform(0.05, 0.3), os.kill, (pid, signal.SIGTERM)).start()
        with pytest.raises(ray.exceptions.RayActorError) as died:
            while True:  # tiny tasks back to back: most of the time is Ray's, between tasks
                ray.get(worker.step.remote(rng.randint(0, 20000)))
        causes.append("receives a SIGTERM" in str(died.value))
    assert all(causes), f"{causes.count(False)} of 5 SIGTERMs read as a crash"
