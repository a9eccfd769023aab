"""Datasets from JSONL files (one JSON object a line): the ``data:`` block and its reader.

    data:
      train_path: data/train.jsonl     # {"prompt": "12+3=", "answer": "15"} per line
      val_path: data/val.jsonl

Which fields a line must have depends on the loop: GRPO, async GRPO, PPO and distillation read
``prompt`` and ``answer``; SFT ``prompt`` and ``response``; DPO and RM ``prompt``, ``chosen`` and
``rejected``. ``data.<field>_key`` renames a field. A bad line is one :class:`DataError` naming
the setting, ``file:line`` (``:col`` for JSON syntax) and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spanspec.findings import did_you_mean

__all__ = ["DataConfig", "DataError", "Row", "read_jsonl", "write_jsonl"]

Row = tuple[int, dict[str, str]]
"""One example: its line number and its fields (role -> text)."""


class DataError(ValueError):
    """A dataset file that cannot be used; the message names the setting and ``file:line``."""


class DataConfig(BaseModel):
    """The run's dataset files (``data:``); without ``train_path`` the built-in arithmetic task
    is used."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train_path: str | None = None
    """JSONL training examples, one JSON object a line; replaces the built-in task."""
    val_path: str | None = None
    """JSONL held-out examples (same fields) for validation; required with ``train_path``."""
    prompt_key: str = "prompt"
    """Field holding the prompt text (every loop)."""
    answer_key: str = "answer"
    """Field holding the reference answer the verifier (``env.name``) checks: GRPO, async GRPO,
    PPO, distillation. A string or a number."""
    response_key: str = "response"
    """Field holding the target response: SFT."""
    chosen_key: str = "chosen"
    """Field holding the preferred response: DPO, RM."""
    rejected_key: str = "rejected"
    """Field holding the dispreferred response: DPO, RM."""
    max_prompt_tokens: int | None = Field(None, ge=1)
    """Prompts longer than this many tokens (bos and chat template included) are dropped, not
    cut (a truncated question has no right answer); the count is in the start-up line and the
    job span. None: no limit."""
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template as a user turn, ending where the
    assistant's answer starts (the tokenizer must have one)."""

    @field_validator("train_path", "val_path")
    @classmethod
    def _absolute(cls, path: str | None) -> str | None:
        # Workers (the async collector) may start in another working directory.
        return os.path.abspath(path) if path else None

    def key(self, role: str) -> str:
        """Returns the field name holding ``role`` (``prompt``, ``answer``, ...) in a line."""
        return getattr(self, f"{role}_key")


def read_jsonl(
    path: str, roles: Iterable[str], data: DataConfig, setting: str, numbers: Iterable[str] = ()
) -> list[Row]:
    """Returns ``(line number, {role: text})`` for each non-blank line of the JSONL file ``path``.

    Each line must be a JSON object whose field ``data.key(role)`` is a string for every role
    (for a role in ``numbers``, a number is taken as its text too). Raises :class:`DataError`
    naming ``setting`` (``data.train_path``) and ``file:line`` for a missing or unreadable file,
    text that is not UTF-8, a line that is not a JSON object, a missing field, a field of another
    type or an empty prompt, and for a file without examples.
    """
    roles, numbers = list(roles), set(numbers)

    def fail(where: str, what: str) -> DataError:
        return DataError(f"{setting}: {where}: {what}")

    if not os.path.exists(path):
        raise fail(path, "no such file")
    if not os.path.isfile(path):
        raise fail(path, "not a file (give a JSONL file: one JSON object a line)")
    try:
        with open(path, "rb") as f:
            raw_lines = f.read().splitlines()
    except OSError as e:
        raise fail(path, f"cannot read it ({e.strerror})") from None
    rows: list[Row] = []
    for number, raw in enumerate(raw_lines, start=1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"{where}:{e.start + 1}", "not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise fail(f"{where}:{e.colno}", f"not JSON ({e.msg})") from None
        if not isinstance(value, dict):
            raise fail(where, f"{_kind(value)}, expected a JSON object with {_fields(roles, data)}")
        try:
            rows.append((number, _fields_of(value, roles, numbers, data)))
        except ValueError as e:
            raise fail(where, str(e)) from None
    if not rows:
        raise fail(
            path,
            f"no examples: the file is empty (give one JSON object with {_fields(roles, data)} "
            "a line)",
        )
    return rows


def _fields_of(
    value: dict[str, Any], roles: list[str], numbers: set[str], data: DataConfig
) -> dict[str, str]:
    """Returns the line's ``{role: text}``; raises ``ValueError`` saying which field is wrong."""
    out = {}
    for role in roles:
        key = data.key(role)
        if key not in value:
            hint = did_you_mean(key, [k for k in value if isinstance(k, str)])
            setting = f"data.{role}_key"
            raise ValueError(
                f'no "{key}" field{hint} (the line has {", ".join(map(json.dumps, value)) or "none"}; '
                f"{setting} names the field)"
            )
        text = value[key]
        if role in numbers and isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            expected = "a string or a number" if role in numbers else "a string"
            raise ValueError(f'"{key}" is {_kind(text)}, expected {expected}')
        if role == "prompt" and not text.strip():
            raise ValueError(f'"{key}" is empty')
        out[role] = text
    return out


def _fields(roles: list[str], data: DataConfig) -> str:
    return " and ".join(f'"{data.key(r)}"' for r in roles)


def _kind(value: Any) -> str:
    """``a number (42)``, ``a list``, ``null``: what a JSON value is, for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def write_jsonl(path: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Writes one JSON object a line to ``path`` (its folder made if missing); returns the
    number of lines."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
