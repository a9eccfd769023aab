"""The reaper finds a run's processes by the marker in their environment, whatever they are named."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nemo_rl.distributed import ray_reaper

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if ray_reaper._alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _start(marker: str | None, *, orphan: bool = False) -> int:
    """A sleeping process carrying ``marker``; with ``orphan`` its parent exits at once."""
    env = {k: v for k, v in os.environ.items() if k != ray_reaper.MARKER_ENV}
    if not orphan:
        if marker:
            env[ray_reaper.MARKER_ENV] = marker
        return subprocess.Popen(SLEEPER, env=env, start_new_session=True).pid
    # Only the sleeper carries the marker: a run starting in another test meanwhile ends the
    # processes of a marker whose driver is gone, and must not end the parent before it prints.
    spawn = (  # the sleeper holds none of the pipes this waits on
        "import os, subprocess as s; print(s.Popen("
        f"{SLEEPER!r}, env={{**os.environ, {ray_reaper.MARKER_ENV!r}: {marker!r}}}, "
        "stdin=s.DEVNULL, stdout=s.DEVNULL, stderr=s.DEVNULL, start_new_session=True).pid)"
    )
    out = subprocess.run([sys.executable, "-c", spawn], env=env, capture_output=True, text=True)
    return int(out.stdout)


def test_mark_run_is_fresh_each_time_and_led_by_the_pid(monkeypatch):
    monkeypatch.delenv(ray_reaper.MARKER_ENV, raising=False)
    first = ray_reaper.mark_run()
    second = ray_reaper.mark_run()
    assert first != second and os.environ[ray_reaper.MARKER_ENV] == second
    assert second.split("-")[0] == str(os.getpid())


def test_marked_processes_are_the_marked_ones_only():
    marker = f"{os.getpid()}-testmarked"
    mine, other, unmarked = _start(marker), _start("1-someoneelse"), _start(None)
    try:
        assert ray_reaper.marked_processes(marker) == [mine]
    finally:
        for pid in (mine, other, unmarked):
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def test_a_process_below_a_marked_one_is_the_runs_though_its_copy_is_blank():
    """Ray's agents may blank their copy of the marker when they take their title: they are the
    raylet's children, and so the run's."""
    marker = f"{os.getpid()}-testbelow"
    env = {**os.environ, ray_reaper.MARKER_ENV: marker}
    spawn = (  # a marked parent whose child's environment has no marker
        "import os, subprocess as s, sys, time; "
        f"env = {{k: v for k, v in os.environ.items() if k != {ray_reaper.MARKER_ENV!r}}}; "
        f"print(s.Popen({SLEEPER!r}, env=env).pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", spawn], env=env, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert ray_reaper._marker(child) is None
        assert ray_reaper.marked_processes(marker) == sorted([parent.pid, child])
    finally:
        for pid in (child, parent.pid):
            os.kill(pid, 9)
        parent.wait()


def test_clean_orphans_ends_a_run_whose_driver_is_gone_and_spares_a_live_one():
    gone_driver = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone_driver.stdout)
    orphans = [_start(f"{dead}-testorphan", orphan=True) for _ in range(2)]
    live = _start(f"{os.getpid()}-testlive", orphan=True)
    try:
        # (another run starting meanwhile may end the orphans first: they must be gone either way)
        ended = ray_reaper.clean_orphans()
        assert live not in ended
        assert not _wait_gone(orphans)
        assert ray_reaper._alive(live)
    finally:
        for pid in [*orphans, live]:
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def test_the_reaper_ends_the_marked_processes_once_the_driver_is_gone():
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    marker = f"{driver.pid}-testreap"
    marked = [_start(marker, orphan=True) for _ in range(2)]
    reaper = subprocess.Popen(
        [sys.executable, "-m", "nemo_rl.distributed.ray_reaper", str(driver.pid), marker]
    )
    try:
        driver.wait()
        assert reaper.wait(timeout=30) == 0
        assert not _wait_gone(marked, timeout=1)
    finally:
        for pid in marked:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
