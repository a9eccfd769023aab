"""The console exporter's one stream: OTLP/JSON lines on stdout, and nothing else there.

Every exporting process appends its console lines (spans, metrics and logs, each export request
one OTLP/JSON line, as in ``traces.jsonl``) to one shared file, ``<file_dir>/console.jsonl``
(opened ``O_APPEND``, one ``os.write`` a line, so processes never tear each other's lines). The
process that owns the console (``setup(console_owner=True)``: a program's main process) takes
its stdout for telemetry: the original stdout is kept for the lines, and file descriptor 1 (so
``print``, logging to stdout, and what a child process or a framework forwards there) is pointed
at stderr. A pump thread copies each complete line of the shared file to the kept stdout, and
copies the rest at shutdown, after the other processes have flushed. So ``program | jq .`` reads
one JSON object per line, every process's, and people read stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

__all__ = ["CONSOLE_FILE", "ConsolePump", "take_stdout"]

CONSOLE_FILE = "console.jsonl"

_kept_stdout: int | None = None


def take_stdout() -> int:
    """Reserve this process's stdout for telemetry lines; return a descriptor of it.

    The first call keeps a duplicate of file descriptor 1 and points descriptor 1 at stderr
    (``sys.stdout`` still writes to descriptor 1, so every human line goes to stderr, line
    buffered); later calls return the same descriptor.
    """
    global _kept_stdout
    if _kept_stdout is None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        _kept_stdout = os.dup(1)
        os.dup2(2, 1)
        with contextlib.suppress(Exception):
            sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    return _kept_stdout


class ConsolePump:
    """Copies the complete lines appended to ``path`` (from its end now) to descriptor ``out``."""

    def __init__(self, path: Path, out: int, interval_s: float = 0.1) -> None:
        self._file = path.open("rb")
        self._file.seek(0, os.SEEK_END)
        self._out = out
        self._pending = b""
        self._broken = False  # the reader went away (``| head``): stop writing, quietly
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval_s = interval_s
        self._thread = threading.Thread(target=self._run, name="spanspec-console", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.copy()

    def copy(self) -> None:
        """Copy every complete line appended since the last copy."""
        with self._lock:
            if self._file.closed:
                return
            data = self._file.read()
            if not data:
                return
            data = self._pending + data
            end = data.rfind(b"\n") + 1
            self._pending, whole = data[end:], memoryview(data[:end])
            while whole and not self._broken:
                try:
                    whole = whole[os.write(self._out, whole) :]
                except BrokenPipeError:
                    self._broken = True
                except InterruptedError:
                    continue

    def stop(self) -> None:
        """Copy what is left (every other process has flushed by now) and stop."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.copy()
        with self._lock:
            self._file.close()
