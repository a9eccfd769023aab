"""Finding the files a command reads under a folder, reporting what cannot be read as findings;
and writing a file so that a failure never leaves half of it (:func:`write_atomically`), nor
blocks on something that is not a regular file (:func:`not_a_regular_file`).

Linked folders are not entered (so a link loop cannot recurse); a folder that cannot be listed,
and a link that loops or leads nowhere, become a ``file.unreadable`` violation of that path while
every other file is still found.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from spanspec.findings import Finding

__all__ = [
    "broken_link",
    "not_a_regular_file",
    "not_regular_output",
    "walk",
    "write_atomically",
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
