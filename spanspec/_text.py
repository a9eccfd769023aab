"""Text as it may be written or shown: the stated rules every writer and reader follows.

- :func:`repair`: text that cannot be encoded as UTF-8 (a lone surrogate, as ``os.fsdecode``
  makes of an undecodable path) has each such code point replaced by U+FFFD, the replacement
  character; anything not text is written as its ``str()``.
- :func:`safe_text`: text from a trace reaches a terminal with every control character
  (C0, DEL, C1, and the bidirectional and line/paragraph separators) written as an escape
  (``\\x1b``, ``\\u2028``), so a trace can neither move the cursor nor forge a line.
- :func:`shorten`: long text (a 1 MB span name) is shown as its head and its length.

A leaf module: it imports nothing of spanspec.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but TAB, DEL, C1 controls, and the format characters that reorder or break lines
_CONTROL = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def repair(value: Any) -> tuple[str, bool]:
    """Return ``(text, changed)``: ``value`` as UTF-8-encodable text, by the rule above."""
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:
            value = f"<{type(value).__name__}>"
        text, _ = repair(value)
        return text, True
    if value.isascii():
        return value, False
    text, n = _SURROGATE.subn(REPLACEMENT, value)
    return text, n > 0


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(value: Any, limit: int | None = None) -> str:
    """``value`` as text safe for a terminal line: control characters escaped (``\\x1b``,
    ``\\r``, ``\\u2028``), lone surrogates replaced by U+FFFD, and with ``limit`` shortened
    (see :func:`shorten`)."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None:
        text = shorten(text, limit)
    if not text.isascii():
        text = _SURROGATE.sub(REPLACEMENT, text)
    elif text.isprintable():
        return text
    return _CONTROL.sub(_escape, text)


def shorten(text: str, limit: int = 200) -> str:
    """``text`` itself when at most ``limit`` characters, else its head and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def _finite(value: Any) -> Any:
    """``value`` with each non-finite float written as protobuf-JSON does ("NaN", "Infinity")."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """``value`` as JSON that can sit inside an HTML ``<script>`` element whatever its strings
    hold: every non-ASCII character (U+2028 and U+2029 included, lone surrogates too) and every
    ``<``, ``>`` and ``&`` written as a ``\\uXXXX`` escape, so no string can end the element,
    open a comment or break the JavaScript; NaN and infinities as strings."""
    text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=True, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def terminal_safe_span(span: Any) -> Any:
    """A trace's span record (a dataclass with ``name``, ``attributes``, ``resource``) with its
    text made :func:`safe_text`, for a reader that prints it; the same object when clean."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return safe_text(value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {safe_text(str(k)): clean(v) for k, v in value.items()}
        return value

    fixed = {
        "name": safe_text(span.name),
        "attributes": clean(dict(span.attributes)),
        "resource": clean(dict(span.resource)),
    }
    if fixed["name"] == span.name and fixed["attributes"] == dict(span.attributes):
        if fixed["resource"] == dict(span.resource):
            return span
    return dataclasses.replace(span, **fixed)
