"""The figures the README quotes, and the check that a run printed them.

The README quotes what a command prints in fenced ``text`` blocks each preceded by a marker line,
``<!-- figures: full -->`` (the shipped configs, rerun on request by
tests/functional/test_readme_figures.py) or ``<!-- figures: ci -->`` (the commands the
functional tests run on every CI run, checked there against the run's own output). In a block,
a line ``$ python examples/run_<algo>.py [overrides]`` starts a command; the lines after it are
lines the command prints. A printed line matches when its words are the quoted ones and each of
its numbers is within the margin of the quoted number: integers (step numbers, counts) exactly,
decimals within ``ABS_MARGIN`` or ``REL_MARGIN`` of the quoted value, whichever is larger.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ABS_MARGIN = 0.05
REL_MARGIN = 0.25
MARKER = re.compile(r"^<!-- figures: (full|ci) -->$")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class Quote:
    """One quoted command and the lines it prints."""

    size: str  # "full" or "ci"
    command: str
    line: int  # where the command is in the README (1-based)
    lines: list[str] = field(default_factory=list)


def quotes(text: str | None = None) -> list[Quote]:
    """Every quoted command of the README's figures blocks, in order."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    out: list[Quote] = []
    size = None
    in_block = False
    for number, line in enumerate(lines, 1):
        marker = MARKER.match(line.strip())
        if marker:
            size = marker.group(1)
            continue
        if size and not in_block and line.strip() == "```text":
            in_block = True
            continue
        if in_block and line.strip() == "```":
            in_block, size = False, None
            continue
        if in_block:
            if line.startswith("$ "):
                out.append(Quote(size, line[2:].strip(), number))
            elif line.strip():
                assert out, f"README.md:{number}: a printed line before any `$ command`"
                out[-1].lines.append(line.strip())
    return out


def shape(line: str) -> str:
    """The line with each number replaced by ``#``: what must match word for word."""
    return NUMBER.sub("#", line.strip())


def within(quoted: str, printed: str) -> bool:
    """Whether ``printed`` is ``quoted`` within the margin (see the module's docstring)."""
    if "." not in quoted:
        return quoted == printed
    want, got = float(quoted), float(printed)
    return abs(got - want) <= max(ABS_MARGIN, REL_MARGIN * abs(want))


def mismatches(quote: Quote, output: str) -> list[str]:
    """What of ``quote``'s lines ``output`` does not print (empty: every figure reproduces)."""
    printed = [line.strip() for line in output.splitlines()]
    problems = []
    for want in quote.lines:
        candidates = [p for p in printed if shape(p) == shape(want)]
        if not candidates:
            problems.append(f"README.md:{quote.line}: no printed line like {want!r}")
            continue
        got = candidates[-1]  # the last such line: the run's final summary
        pairs = zip(NUMBER.findall(want), NUMBER.findall(got), strict=True)
        if not all(within(w, g) for w, g in pairs):
            problems.append(f"README.md:{quote.line}: quoted {want!r}, printed {got!r}")
    return problems


def ci_quote(script: str, args: list[str]) -> Quote:
    """The README's CI-size quote of ``python examples/<script> <args>`` (``logger.log_dir=``
    left out: each test run writes to its own folder)."""
    kept = [a for a in args if not a.startswith("logger.log_dir=")]
    command = " ".join(["python", f"examples/{script}", *kept])
    found = [q for q in quotes() if q.size == "ci" and q.command == command]
    assert len(found) == 1, f"README.md quotes `{command}` {len(found)} times in a ci block"
    return found[0]


def check_ci_figures(script: str, args: list[str], output: str) -> None:
    """Assert that the run of ``script`` with ``args`` printed the README's figures for it."""
    quote = ci_quote(script, args)
    assert quote.lines, f"README.md:{quote.line}: no printed line quoted"
    problems = mismatches(quote, output)
    assert not problems, "\n".join(problems)
