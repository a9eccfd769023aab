"""No Ray process outlives the run that started it.

A local cluster's helpers (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, idle workers) are
re-parented to init and stay when the driver is killed with SIGKILL: nothing of the driver runs
to stop them. Two guards:

- :func:`start_reaper`: a small process, in its own session, that waits for the driver to end
  and then ends every process of that Ray session left behind (within a few seconds); after a
  clean ``ray.shutdown`` it finds nothing.
- :func:`clean_orphans`: at the next start, processes of a Ray session whose raylet is gone and
  whose parent is init are ended, and the run says how many.

A session's processes are told apart by its folder (``.../session_<date>_<pid>``), which each of
them names on its command line, and their children.

Run as ``python -m nemo_rl.distributed.ray_reaper DRIVER_PID SESSION_DIR``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["clean_orphans", "start_reaper"]

_SESSION = re.compile(r"(/[^\s'\"=]*/session_\d{4}-\d\d-\d\d_[\d-]+_[\d_]+)")


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _own_processes() -> list[int]:
    uid = os.getuid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


def session_processes(session_dir: str) -> list[int]:
    """The live processes of the Ray session in ``session_dir``, and their children."""
    pids = _own_processes()
    found = {p for p in pids if session_dir in _cmdline(p)}
    grew = True
    while grew:
        children = {p for p in pids if _ppid(p) in found} - found
        grew = bool(children)
        found |= children
    return sorted(found)


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
    """End the processes of Ray sessions left by a driver killed earlier: a session none of whose
    processes is a raylet any more, whose processes' parent is init. Returns their pids."""
    sessions: dict[str, list[int]] = {}
    for pid in _own_processes():
        cmd = _cmdline(pid)
        if not cmd.startswith("ray::") and "ray" not in cmd:
            continue
        match = _SESSION.search(cmd)
        if match:
            sessions.setdefault(match.group(1), []).append(pid)
    ended: list[int] = []
    for session, pids in sessions.items():
        if any("raylet" in _cmdline(p).split(" ", 1)[0] for p in pids):
            continue  # a live cluster
        if not all(_ppid(p) == 1 for p in pids):
            continue  # its driver (or a reaper) is still about
        left = session_processes(session)
        _end(left)
        ended += left
    return ended


def start_reaper(session_dir: str) -> subprocess.Popen | None:
    """Start the process that ends ``session_dir``'s Ray processes once this process is gone."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "nemo_rl.distributed.ray_reaper", str(os.getpid()), session_dir],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or SIGHUP to the run's group does not reach it
            close_fds=True,
        )
    except OSError:
        return None


def _reap(driver: int, session_dir: str) -> None:
    while _alive(driver):
        time.sleep(0.5)
    time.sleep(1.0)  # a clean ray.shutdown is already done; a killed driver's raylet follows it
    _end(session_processes(session_dir))


if __name__ == "__main__":
    _reap(int(sys.argv[1]), sys.argv[2])
