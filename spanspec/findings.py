"""Findings: problems reported as data (id, level, message, location), never a traceback.

Modelled on OpenTelemetry Weaver: every check collects findings instead of stopping at the first,
and the CLI prints each as ``file:line:col: level: id: message``.
"""

from __future__ import annotations

import datetime
import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "Finding",
    "Level",
    "SpecError",
    "a_type",
    "as_yaml",
    "closest",
    "did_you_mean",
    "validation_message",
]

Level = Literal["violation", "improvement", "information"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a registry, config, source file or telemetry file."""

    id: str
    message: str
    level: Level = "violation"
    file: str = "<unknown>"
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.level}: {self.id}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class SpecError(ValueError):
    """Raised when a registry (or a group expression) is invalid; ``.findings`` lists every problem."""

    def __init__(self, findings: Iterable[Finding]) -> None:
        self.findings: tuple[Finding, ...] = tuple(findings)
        super().__init__("\n".join(str(f) for f in self.findings) or "invalid spec")

    @property
    def violations(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "violation")


def a_type(kind: str) -> str:
    """Return an attribute type with its article, for messages: ``"an int"``, ``"a string[]"``."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def closest(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """Return the candidate closest to ``word`` (``difflib`` ratio >= ``cutoff``), or None."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return match[0] if match else None


def did_you_mean(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest candidate, or ``""`` when none is close."""
    match = closest(word, candidates, cutoff)
    return f" (did you mean '{match}'?)" if match else ""


def validation_message(message: str) -> str:
    """pydantic's message in plain words: "Input should be a valid integer, unable to parse
    string as an integer" reads "expected an integer"."""
    message = message.removeprefix("Value error, ")  # pydantic's prefix says nothing
    if message.startswith("Input should be a valid dictionary or instance of"):
        return "expected a mapping (indented key: value lines)"
    message = re.sub(r", unable to (parse|interpret) .*$", "", message)
    message = re.sub(
        r"^Input should be (a valid )?", lambda m: "expected a " if m[1] else "expected ", message
    )
    message = re.sub(r"^expected (less|greater) than", r"expected a number \1 than", message)
    return re.sub(r"^expected a (?=[aeiou])", "expected an ", message)


def as_yaml(value: Any) -> str:
    """A value as the YAML that reads as it (``true``, ``null``, ``'text'``), not Python's repr."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value)
    return str(value)
