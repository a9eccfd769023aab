"""Finding the files a command reads under a folder, reporting what cannot be read as findings.

Linked folders are not entered (so a link loop cannot recurse); a folder that cannot be listed,
and a link that loops or leads nowhere, become a ``file.unreadable`` violation of that path while
every other file is still found.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path

from spanspec.findings import Finding

__all__ = ["broken_link", "walk"]


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
