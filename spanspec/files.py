"""Finding the files a command reads under a folder, reporting what cannot be read as findings;
writing a file so that a failure never leaves half of it (:func:`write_atomically`), nor
blocks on something that is not a regular file (:func:`not_a_regular_file`); and the run pointer
(:data:`RUN_POINTER`), which says where a run's parts went when they are not in one folder.

Linked folders are not entered (so a link loop cannot recurse); a folder that cannot be listed,
and a link that loops or leads nowhere, become a ``file.unreadable`` violation of that path while
every other file is still found.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spanspec.findings import Finding

__all__ = [
    "RUN_POINTER",
    "PointerError",
    "RunPointer",
    "broken_link",
    "not_a_regular_file",
    "not_regular_output",
    "read_run_pointer",
    "walk",
    "write_atomically",
    "write_run_pointers",
]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def not_a_regular_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when something other than a regular file is there (``"a FIFO (named
    pipe)"``, ``"a folder"``, ...), following links; None when it is a regular file or absent.
    Opening a FIFO to write blocks until a reader comes: every writer asks this first."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def not_regular_output(path: str | os.PathLike[str]) -> str | None:
    """One line saying why ``path`` cannot be written as a regular file (``/x/traces.jsonl is a
    FIFO (named pipe), not a regular file; remove it or write elsewhere``), or None."""
    what = not_a_regular_file(path)
    if what is None:
        return None
    return f"{path} is {what}, not a regular file; remove it or write elsewhere"


def write_atomically(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a sibling temporary file, then rename it over ``target``: a failed
    write (disk full, killed) leaves the previous file whole and no temporary file behind.

    Raises:
        OSError: when it cannot be written; ``IsADirectoryError`` (errno EISDIR) naming what is
            there when ``target`` is not a regular file (a FIFO, a folder, a device).
    """
    import errno

    target = Path(target)
    what = not_a_regular_file(target)
    if what:
        raise OSError(errno.EISDIR, f"{what} is there, not a regular file")
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def broken_link(path: Path) -> Finding | None:
    """A finding for a symbolic link that loops or leads nowhere, else None."""
    if not path.is_symlink():
        return None
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop this way
        return Finding("file.unreadable", "a symbolic link that loops", file=str(path))
    except OSError as exc:
        import errno

        what = "loops" if exc.errno == errno.ELOOP else "leads nowhere"
        return Finding("file.unreadable", f"a symbolic link that {what}", file=str(path))
    return None


def walk(
    root: str | os.PathLike[str], suffixes: tuple[str, ...], skip: Collection[str] = ()
) -> Iterator[tuple[Path, Finding | None]]:
    """Yield ``(file, None)`` for each file under ``root`` ending in ``suffixes`` (sorted, hidden
    folders and ``skip`` left out), and ``(path, finding)`` for each path that cannot be read."""
    problems: list[OSError] = []
    for folder, dirs, names in os.walk(root, onerror=problems.append):
        while problems:
            yield _unlistable(problems.pop(0), folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip)
        for name in sorted(names):
            path = Path(folder) / name
            if name.endswith(suffixes):
                yield path, broken_link(path)
    for exc in problems:  # the root itself could not be listed
        yield _unlistable(exc, root)


def _unlistable(exc: OSError, where: str | os.PathLike[str]) -> tuple[Path, Finding]:
    path = str(exc.filename or where)
    return Path(path), Finding("file.unreadable", f"cannot read folder: {exc.strerror}", file=path)


# -- the run pointer ------------------------------------------------------------------------------

RUN_POINTER = "spanspec-run.json"
"""The run pointer's file name. A run pointer is a small JSON object saying where a run's parts
went when they are not in one folder (a program wrote its traces elsewhere):

- in a run folder, ``{"traces": FOLDER}``: where the run's trace files are;
- in a trace folder, ``{"runs": {RUN_ID: FOLDER}}``: the run folder (where the run's metrics
  file is) of each run whose traces are there; ``""`` for a run without an id.

A relative path is relative to the pointer file's folder; :func:`write_run_pointers` writes them
so, so both folders moved together still point at each other. The readers follow one pointer,
never a chain."""


class PointerError(ValueError):
    """A run pointer that cannot be read or followed: one line naming the file and the path."""


@dataclass(frozen=True)
class RunPointer:
    """What a :data:`RUN_POINTER` file says, paths resolved against its folder."""

    file: Path
    """The pointer file."""
    traces: Path | None = None
    """The folder of the run's trace files, if the pointer names one."""
    runs: Mapping[str, Path] = field(default_factory=dict)
    """The run folder of each run whose traces are next to the pointer, by run id."""
    written: Mapping[str, str] = field(default_factory=dict)
    """Each path as written in the file (``traces``, ``runs.<id>``), for messages."""

    def trace_folder(self) -> Path | None:
        """The folder ``traces`` points at; None when the pointer names none.

        Raises:
            PointerError: when that folder does not exist (or is not a folder).
        """
        if self.traces is None:
            return None
        if not self.traces.is_dir():
            raise PointerError(self._missing("traces", self.traces))
        return self.traces

    def run_folder(self, run_id: str | None) -> Path | None:
        """The run folder of ``run_id`` (None: the run without an id, or the only run named);
        None when the pointer names none.

        Raises:
            PointerError: when the folder it names does not exist.
        """
        key = run_id if run_id is not None else ""
        if key not in self.runs:
            if run_id is not None or len(self.runs) != 1:
                return None
            key = next(iter(self.runs))
        folder = self.runs[key]
        if not folder.is_dir():
            raise PointerError(self._missing(f"runs.{key}" if key else "runs", folder))
        return folder

    def _missing(self, key: str, target: Path) -> str:
        raw = self.written.get(key, str(target))
        shown = f"{target} (written {raw!r})" if raw != str(target) else str(target)
        return (
            f"{self.file}: {key!r} points to {shown}, which is no folder; move that folder back "
            f"(a relative path is relative to {self.file.parent}), or fix or delete {self.file}"
        )


def read_run_pointer(folder: str | os.PathLike[str]) -> RunPointer | None:
    """The run pointer in ``folder``; None when there is none. Nothing is checked to exist.

    Raises:
        PointerError: when the file cannot be read, is not JSON, or is not an object whose
            ``traces`` is a path and ``runs`` an object of paths.
    """
    file = Path(folder) / RUN_POINTER
    if not file.exists() and not file.is_symlink():
        return None
    what = not_a_regular_file(file)
    if what:
        raise PointerError(f"{file}: cannot read the run pointer: {what} is there, not a file")
    try:
        with open(file, encoding="utf-8") as f:
            body = json.load(f)
    except OSError as exc:
        raise PointerError(f"{file}: cannot read the run pointer: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PointerError(
            f"{file}: the run pointer is not JSON ({exc}); expected "
            '{"traces": "FOLDER"} or {"runs": {"RUN_ID": "FOLDER"}}; fix or delete it'
        ) from None
    expected = 'expected {"traces": "FOLDER"} or {"runs": {"RUN_ID": "FOLDER"}}; fix or delete it'
    if not isinstance(body, dict):
        raise PointerError(f"{file}: the run pointer is a JSON {type(body).__name__}; {expected}")
    base = file.parent
    written: dict[str, str] = {}
    traces = body.get("traces")
    if traces is not None and (not isinstance(traces, str) or not traces.strip()):
        raise PointerError(f"{file}: 'traces' is {traces!r}, not a path; {expected}")
    runs = body.get("runs", {})
    if not isinstance(runs, dict) or not all(
        isinstance(v, str) and v.strip() for v in runs.values()
    ):
        raise PointerError(f"{file}: 'runs' is {runs!r}, not an object of paths; {expected}")
    if traces is not None:
        written["traces"] = traces
    written.update({f"runs.{k}" if k else "runs": v for k, v in runs.items()})
    return RunPointer(
        file=file,
        traces=_resolve(base, traces) if traces is not None else None,
        runs={str(k): _resolve(base, v) for k, v in runs.items()},
        written=written,
    )


def _resolve(base: Path, written: str) -> Path:
    path = Path(written).expanduser()
    return Path(os.path.normpath(base / path)) if not path.is_absolute() else path


def write_run_pointers(
    run_folder: str | os.PathLike[str], trace_folder: str | os.PathLike[str], run_id: str = ""
) -> list[Path]:
    """Make a run folder and the folder its traces went to point at each other: ``traces`` in
    the run folder's pointer, ``runs.<run_id>`` added to the trace folder's (the other runs it
    names are kept). Paths are written relative to the pointer's folder (absolute where none
    leads there, another drive). Nothing is written when the trace folder is the run folder or
    inside it (the readers find the traces there without a pointer).

    Returns:
        The pointer files written (none, or two).

    Raises:
        OSError: when a folder or a pointer cannot be written.
    """
    run = Path(run_folder).expanduser().resolve()
    traces = Path(trace_folder).expanduser().resolve()
    if traces == run or run in traces.parents:
        return []
    run.mkdir(parents=True, exist_ok=True)
    traces.mkdir(parents=True, exist_ok=True)
    written = []
    for folder, key, target in ((run, "traces", traces), (traces, "runs", run)):
        try:
            body = json.loads((folder / RUN_POINTER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            body = {}
        if not isinstance(body, dict):
            body = {}
        value = _relative(target, folder)
        if key == "runs":
            runs = body.get("runs")
            body["runs"] = {**(runs if isinstance(runs, dict) else {}), run_id: value}
        else:
            body["traces"] = value
        write_atomically(folder / RUN_POINTER, json.dumps(body, indent=2, sort_keys=True) + "\n")
        written.append(folder / RUN_POINTER)
    return written


def _relative(target: Path, start: Path) -> str:
    try:
        return os.path.relpath(target, start)
    except ValueError:  # no relative path between them (another drive)
        return str(target)
