"""The ``spanspec`` command line: check | groups | docs | schema | live-check | view | report |
diff.

Every problem is a finding printed as ``file:line:col: level: id: message`` (or JSON with
``--format json``), all of them in one run. Exit codes:

- 0: no violation (improvements and information may have been printed);
- 1: at least one violation, or nothing to show (``view`` of a file without spans);
- 2: a usage error (bad option, unknown group in ``--groups``), one line on stderr;
- 3: a bug in spanspec, one line on stderr (``SPANSPEC_DEBUG=1`` shows the traceback).

The user never sees a traceback otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from spanspec.cli import check, diff, docs, groups, live_check, report, schema, view
from spanspec.cli._common import UsageError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit code 2
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spanspec",
        description="Check, explain and document a span registry, and hold emitted traces to it.",
        epilog="exit codes: 0 ok, 1 violations, 2 usage error, 3 internal error",
    )
    from spanspec import __version__

    parser.add_argument("--version", action="version", version=f"spanspec {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for command in (check, groups, docs, schema, live_check, view, report, diff):
        command.add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``spanspec`` command line.

    Returns:
        The exit code: 0 ok, 1 violations, 2 usage error, 3 internal error. Never raises
        (``--help`` and ``--version`` return 0).
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as exc:
        print(f"spanspec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `spanspec groups all | head`
        try:
            sys.stdout = open(os.devnull, "w")  # silence the flush at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("SPANSPEC_DEBUG"):
            traceback.print_exc()
        print(
            f"spanspec {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(a bug in spanspec; SPANSPEC_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
