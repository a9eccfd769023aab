"""No Ray process outlives the run that started it.

A local cluster's helpers (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, idle workers) are
re-parented to init and stay when the driver is killed with SIGKILL: nothing of the driver runs
to stop them. A run's processes are told apart by a marker, not by their names or command lines:
before the cluster starts, the driver puts ``NEMO_RL_RUN_MARKER=<pid>-<random>`` in its
environment, and every process it starts from then on (GCS, raylet, Ray's agents, workers, the
engines and tools they start) inherits it; ``/proc/PID/environ`` shows it. A process that takes
a title by writing over its arguments' memory (Ray's agents: ``ray::DashboardAgent``) may blank
the start of that page of its environment too, the marker with it, depending on the lengths of
its command line and variables; so a run's processes are the marked ones and every process
below one of them (the agents are the raylet's children). Two guards:

- :func:`start_reaper`: a small process, in its own session, that waits for the driver to end
  and then ends every process carrying the run's marker (within a few seconds); after a clean
  ``ray.shutdown`` it finds nothing.
- :func:`clean_orphans`: at the next start (should the reaper have been killed too), the
  processes of a marker whose driver is gone are ended, and the run says how many.

Run as ``python -I -S nemo_rl/distributed/ray_reaper.py DRIVER_PID MARKER`` (standard library only).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

__all__ = ["MARKER_ENV", "clean_orphans", "mark_run", "marked_processes", "start_reaper"]

MARKER_ENV = "NEMO_RL_RUN_MARKER"
_MARKER_KEY = MARKER_ENV.encode() + b"="


def _marker(pid: int) -> str | None:
    """The run marker in ``pid``'s environment (as it was when the process started), if any."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(_MARKER_KEY):
            return entry[len(_MARKER_KEY) :].decode(errors="replace")
    return None


def _own_processes() -> dict[int, int]:
    """This user's live processes (this one left out), each with its parent's pid."""
    uid, me = os.getuid(), os.getpid()
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            # after the command's closing parenthesis: state, then the parent's pid
            state, ppid = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state != "Z":
            out[int(entry)] = int(ppid)
    return out


def _runs() -> dict[str, list[int]]:
    """Every run's live processes, by marker: those whose environment holds it, and those
    below one of them (whose own copy of it may have been blanked by their title)."""
    parents = _own_processes()
    markers = {pid: m for pid in parents if (m := _marker(pid))}

    def marker_of(pid: int) -> str | None:
        seen = set()
        while pid in parents and pid not in seen:
            if pid in markers:
                return markers[pid]
            seen.add(pid)
            pid = parents[pid]
        return None

    runs: dict[str, list[int]] = {}
    for pid in parents:
        if marker := marker_of(pid):
            runs.setdefault(marker, []).append(pid)
    return runs


def mark_run() -> str:
    """Give the processes this one starts from now on a fresh run marker; returns it.

    Always a new one: a run started by another run (a teacher trained first, a test's driver)
    gets a marker of its own, so reaping one never ends the other.
    """
    marker = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[MARKER_ENV] = marker
    return marker


def marked_processes(marker: str) -> list[int]:
    """The live processes of the run ``marker`` (of this user, this one left out): those whose
    environment holds it and those below them."""
    return sorted(_runs().get(marker, []))


def _end(pids: list[int], grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def clean_orphans() -> list[int]:
    """End the processes of runs whose driver is gone: the driver's pid leads each marker, so a
    marker whose driver is no longer alive is a run nothing will stop. Returns their pids."""
    ended: list[int] = []
    for marker, pids in _runs().items():
        driver = marker.split("-", 1)[0]
        if not driver.isdigit() or _alive(int(driver)):
            continue  # not one of ours, or its driver is still about
        _end(pids)
        ended += pids
    return sorted(ended)


def start_reaper(marker: str) -> subprocess.Popen | None:
    """Start the process that ends the processes marked ``marker`` once this process is gone."""
    try:
        return subprocess.Popen(
            # By path, isolated and without site: it needs only the standard library, and
            # `-m nemo_rl...` would import the package (Ray, torch: 2 s of CPU on every run).
            [sys.executable, "-I", "-S", __file__, str(os.getpid()), marker],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Unmarked: it is not one of the processes it looks for, and it ends by itself.
            env={k: v for k, v in os.environ.items() if k != MARKER_ENV},
            start_new_session=True,  # a Ctrl-C or SIGHUP to the run's group does not reach it
            close_fds=True,
        )
    except OSError:
        return None


def _reap(driver: int, marker: str) -> None:
    while _alive(driver):
        time.sleep(0.5)
    time.sleep(1.0)  # a clean ray.shutdown is already done; a killed driver's raylet follows it
    # Twice: a worker that was starting when the first pass looked may have forked since.
    for _ in range(2):
        _end(marked_processes(marker))


if __name__ == "__main__":
    _reap(int(sys.argv[1]), sys.argv[2])
