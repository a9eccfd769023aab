"""What every subcommand shares: usage errors, the common options, printing findings, writing files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from spanspec._text import safe_text
from spanspec.checks.check import display, read_registry, same_file
from spanspec.files import write_atomically
from spanspec.findings import Finding
from spanspec.registry import ENV_VAR, RegistryNotFound, default_registry_path
from spanspec.spec import REGISTRY_RESOURCE_ATTRIBUTE, Spec

LEVELS = ("information", "improvement", "violation")


class UsageError(Exception):
    """A bad command line; printed as one line, exit code 2."""


def add_common_options(p: argparse.ArgumentParser, formats: bool = True) -> None:
    """``--registry`` and, with ``formats``, ``--format`` and ``--level``."""
    add_registry_option(p)
    if formats:
        add_output_options(p)


def add_output_options(p: argparse.ArgumentParser) -> None:
    """``--format`` (text or JSON) and ``--level`` of the findings printed."""
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    p.add_argument(
        "--level",
        choices=LEVELS,
        default="information",
        help="print findings of this level and above (the exit code counts all)",
    )


def add_registry_option(p: argparse.ArgumentParser, traces: bool = False) -> None:
    """``--registry PATH``; for the trace readers (``traces``), the default also looks in the
    traces for the registry the run recorded."""
    recorded = ", else the one the traces name" if traces else ""
    p.add_argument(
        "--registry",
        metavar="PATH",
        help=f"the registry file (default: ${ENV_VAR}{recorded}, else the one an installed "
        "package advertises)",
    )


def registry_path(args: argparse.Namespace) -> str | os.PathLike[str]:
    """``--registry``, else the default registry.

    Raises:
        UsageError: when none is given and none (or several) can be found.
    """
    if args.registry:
        return str(args.registry)
    try:
        return default_registry_path()
    except RegistryNotFound as exc:
        raise UsageError(str(exc)) from None


def require_spec(args: argparse.Namespace) -> tuple[Spec | None, list[Finding]]:
    """The registry of ``--registry`` (or the default), compiled, and its findings.

    Raises:
        UsageError: when none is given and none (or several) can be found.
    """
    loaded = read_registry(registry_path(args))
    return loaded.spec, loaded.findings


def reader_registry(
    args: argparse.Namespace, resources: Iterable[dict[str, Any]], required: bool = True
) -> str | os.PathLike[str] | None:
    """The registry a trace reader holds the spans to: ``--registry``, else ``$SPANSPEC_REGISTRY``,
    else the one the run recorded on its resources (the ``spanspec.registry`` attribute, when
    that file exists here), else the one an installed package advertises.

    Returns:
        Its path; None when none was found and ``required`` is False.

    Raises:
        UsageError: when none was found and ``required``.
    """
    path: str | os.PathLike[str] | None = args.registry or os.environ.get(ENV_VAR, "").strip()
    if not path:
        path = next(
            (
                str(r[REGISTRY_RESOURCE_ATTRIBUTE])
                for r in resources
                if isinstance(r.get(REGISTRY_RESOURCE_ATTRIBUTE), str)
                and Path(r[REGISTRY_RESOURCE_ATTRIBUTE]).is_file()
            ),
            None,
        )
    if not path:
        try:
            path = default_registry_path()
        except RegistryNotFound as exc:
            if required:
                raise UsageError(str(exc)) from None
            return None
    return path


def reader_spec(
    args: argparse.Namespace, resources: Iterable[dict[str, Any]], required: bool = True
) -> Spec | None:
    """The compiled registry of :func:`reader_registry`.

    Returns:
        The spec; None when ``required`` is False and none was given and the default is missing
        or has violations (the reader then uses neutral conventions).

    Raises:
        UsageError: for a registry with violations (the first one, and how many more), or
            none found where ``required``.
    """
    path = reader_registry(args, resources, required)
    if path is None:
        return None
    loaded = read_registry(path)
    if loaded.spec is None and not required and not args.registry:
        return None  # a reader that can do without: a broken default is not its problem
    if loaded.spec is None:
        bad = [f for f in loaded.findings if f.level == "violation"]
        more = (
            f" (and {len(bad) - 1} more; see spanspec check {loaded.path})" if len(bad) > 1 else ""
        )
        raise UsageError(f"{bad[0] if bad else loaded.path}{more}")
    return loaded.spec


# -- output ---------------------------------------------------------------------------------------


def _sorted(findings: Iterable[Finding], files: Sequence[str] = ()) -> list[Finding]:
    """Grouped by file (``files`` first, in that order, then by first appearance), and by
    position inside a file."""
    findings = list(findings)
    order: dict[str, int] = {name: i for i, name in enumerate(files)}
    for f in findings:
        order.setdefault(f.file, len(order))
    return sorted(findings, key=lambda f: (order[f.file], f.line, f.col))


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {
        "violations": sum(f.level == "violation" for f in findings),
        "improvements": sum(f.level == "improvement" for f in findings),
        "information": sum(f.level == "information" for f in findings),
    }


def _summary_line(counts: dict[str, int]) -> str:
    return (
        f"{counts['violations']} violation(s), {counts['improvements']} improvement(s), "
        f"{counts['information']} information"
    )


def emit(
    findings: Sequence[Finding],
    args: argparse.Namespace,
    *,
    title: str,
    summary: dict[str, Any] | None = None,
    text_extra: str = "",
    out: TextIO | None = None,
) -> int:
    """Print findings (text or JSON); return 1 if any is a violation, else 0."""
    out = out or sys.stdout
    findings = _sorted(findings, (summary or {}).get("files", ()))
    counts = _counts(findings)
    shown = [f for f in findings if LEVELS.index(f.level) >= LEVELS.index(args.level)]
    if args.format == "json":
        body = {
            "findings": [f.to_dict() for f in shown],
            "summary": {**counts, "ok": counts["violations"] == 0, **(summary or {})},
        }
        out.write(json.dumps(body, indent=2, default=str) + "\n")
    else:
        for f in shown:  # a finding quotes the input: no control character reaches the terminal
            out.write(f"{safe_text(str(f))}\n")
        if text_extra:
            out.write(text_extra.rstrip("\n") + "\n")
        hidden = len(findings) - len(shown)
        note = f" ({hidden} below --level {args.level} not shown)" if hidden else ""
        out.write(f"{title}: {_summary_line(counts)}{note}\n")
    return 1 if counts["violations"] else 0


# -- files ----------------------------------------------------------------------------------------


def source_name(path: str) -> str:
    """How the docs name their registry: ``schemas/span_groups.yaml`` for the default one (its
    folder and name, so no path of this machine ends up in a committed file)."""
    try:
        default = default_registry_path()
    except RegistryNotFound:
        return display(path)
    if same_file(path, default):
        return f"{default.parent.name}/{default.name}"
    return display(path)


def write_or_check(target: Path, text: str, check: bool, command: str) -> int:
    """Write ``text`` to ``target``; with ``check``, write nothing and exit 1 when it differs."""
    shown = display(target)
    if check:
        try:
            current = target.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current == text:
            print(f"{shown} is up to date")
            return 0
        state = "is missing" if current is None else "is out of date"
        print(Finding("docs.stale", f"{shown} {state}; run `{command}`", file=shown, line=1, col=1))
        return 1
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, text)
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror}") from None
    print(f"wrote {shown}")
    return 0
