"""YAML -> validated schema, with errors that point at ``file:line:column`` of the bad value.

The file is parsed once into a PyYAML node tree (which keeps positions), converted to plain data,
and validated by pydantic. Every pydantic error is mapped back to the node it came from, so a
finding names the file, the line of the bad value, the field, and what was expected.
"""

from __future__ import annotations

import datetime
import gc
import os
import re
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from spanspec.findings import Finding, SpecError, as_yaml, did_you_mean, validation_message
from spanspec.registry._aliases import check_aliases
from spanspec.registry.schema import Registry

__all__ = [
    "Located",
    "gc_paused",
    "load_registry",
    "parse_yaml",
    "reading_errors",
    "validation_findings",
]

Loc = tuple[str | int, ...]
# libyaml when PyYAML was built with it: several times faster on large registries.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Located:
    """Plain YAML data plus the positions of its nodes, for pointing findings at lines."""

    path: str
    data: Any
    root: yaml.Node | None

    def position(self, loc: Loc) -> tuple[int, int]:
        """Return (line, column), 1-based, of the node at ``loc``, or of its deepest ancestor.

        A location ending in a mapping key that does not exist (a missing field) points at the
        mapping that should hold it.
        """
        node = self.root
        if node is None:
            return (1, 1)
        best = node
        for part in loc:
            child = _child(node, part)
            if child is None:
                break
            node, best = child, child
        return (best.start_mark.line + 1, best.start_mark.column + 1)

    def key_position(self, loc: Loc) -> tuple[int, int]:
        """Return the position of the *key* at the end of ``loc`` (for unknown-key findings)."""
        parent = self._node(loc[:-1])
        if isinstance(parent, yaml.MappingNode):
            for key, _ in parent.value:
                if key.value == str(loc[-1]):
                    return (key.start_mark.line + 1, key.start_mark.column + 1)
        return self.position(loc)

    def _node(self, loc: Loc) -> yaml.Node | None:
        node = self.root
        for part in loc:
            node = _child(node, part) if node is not None else None
        return node


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return node.value[part]
    return None


def parse_yaml(path: str | os.PathLike[str], text: str | None = None) -> Located:
    """Parse a YAML file (once) into data and node positions.

    Raises:
        SpecError: when the file cannot be read or decoded, on a syntax error (with its line and
            column), on nesting too deep to parse, or on a duplicate mapping key.
    """
    name = str(path)
    with reading_errors(name):
        if text is None:
            if Path(path).exists() and not Path(path).is_file():  # a folder, FIFO, /dev/zero
                raise IsADirectoryError(0, "not a regular file")
            text = Path(path).read_text(encoding="utf-8")
        loader = _Loader(text)
        try:
            try:
                root = loader.get_single_node()
            except yaml.YAMLError as exc:
                raise SpecError([_syntax_finding(name, text, exc)]) from None
            check_aliases(name, root)
            duplicates = list(_duplicate_keys(root))
            if duplicates:
                raise SpecError(
                    Finding(
                        "yaml.duplicate_key",
                        f"key '{key.value}' appears twice in the same mapping (the first is at line {first.start_mark.line + 1})",
                        file=name,
                        line=key.start_mark.line + 1,
                        col=key.start_mark.column + 1,
                    )
                    for key, first in duplicates
                )
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    return Located(name, data, root)


@contextmanager
def reading_errors(name: str) -> Iterator[None]:
    """Turn what reading a YAML file can raise into one finding each: the one set of YAML errors.

    Raises:
        SpecError: ``file.unreadable`` (missing, unreadable or not UTF-8), ``yaml.syntax`` (with
            the line and column PyYAML names), ``yaml.too_deep``; a :class:`SpecError` passes.
    """
    try:
        yield
    except SpecError:
        raise
    except OSError as exc:
        raise SpecError(
            [Finding("file.unreadable", f"cannot read file: {exc.strerror}", file=name)]
        ) from None
    except UnicodeDecodeError as exc:
        data = bytes(exc.object)
        before = data[: exc.start]
        line, col = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        message = f"not UTF-8 text (byte 0x{data[exc.start]:02x})"
        raise SpecError(
            [Finding("file.unreadable", message, file=name, line=line, col=col)]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = " ".join(filter(None, (exc.context, exc.problem))) or str(exc)
        raise SpecError(
            [Finding("yaml.syntax", f"invalid YAML: {problem}", file=name, line=line, col=col)]
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(
            [Finding("yaml.syntax", f"invalid YAML: {exc}", file=name, line=1, col=1)]
        ) from None
    except RecursionError:
        raise SpecError(
            [Finding("yaml.too_deep", "YAML nested too deeply to parse", file=name, line=1, col=1)]
        ) from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, then restore its previous state.

    Reading a registry allocates many small objects (nodes, dicts, entries) and no cycles worth
    collecting; the collections they trigger otherwise double the time to load 10,000 spans.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _syntax_finding(name: str, text: str, exc: yaml.YAMLError) -> Finding:
    """The YAML error in words, at its line and column: tabs, control characters, the rest."""
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line, col = before.count("\n") + 1, exc.position - before.rfind("\n")
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        what = "a NUL byte" if char == "\0" else f"the control character U+{ord(char):04X}"
        return Finding(
            "yaml.syntax",
            f"invalid YAML: {what} is not allowed in YAML text (is this a binary file?)",
            file=name,
            line=line,
            col=col,
        )
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = " ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None))))
    lines = text.splitlines()
    key_text = (
        re.split(r":(?:\s|$)", lines[line - 1], maxsplit=1)[0] if 0 < line <= len(lines) else ""
    )
    if "simple key" in problem and len(key_text.strip()) > 1024:
        problem = (
            f"a key of {len(key_text.strip())} characters; PyYAML reads a plain key of at most "
            "1,024 characters (shorten the key)"
        )
    elif mark is not None and 0 <= mark.index < len(text) and text[mark.index] == "\t":
        problem = "a tab character; YAML indents with spaces only (replace the tab with spaces)"
    else:
        hint = next((h for known, h in _SYNTAX_HINTS.items() if known in problem), "")
        problem += f" ({hint})" if hint else ""
    return Finding("yaml.syntax", f"invalid YAML: {problem or exc}", file=name, line=line, col=col)


# PyYAML's words for the usual slips, and what to look at.
_SYNTAX_HINTS = {
    "mapping values are not allowed": "quote a value that holds ': ', or check this line's "
    "indentation",
    "did not find expected key": "check this line's indentation against the lines above",
    "did not find expected '-' indicator": "every item of a list starts with '- ' at the same "
    "indentation",
    "did not find expected <document start>": "text after the end of the mapping: check the "
    "indentation",
    "found undefined alias": "an *alias needs an &anchor of that name earlier in the file",
    "mapping keys are not allowed": "'? ' starts a key here: quote the text",
    "could not find expected ':'": "a key needs ': ' after it; check this line's indentation",
    "escape": "in \"double quotes\" a backslash starts an escape: use 'single quotes'",
    "expected hexdecimal number": 'in "double quotes" a backslash starts an escape: use '
    "'single quotes'",
    "found unexpected end of stream": "a quote or bracket is not closed",
    "expected ',' or ']'": "a [list] is not closed, or an item holds an unquoted ','",
    "expected ',' or '}'": "a {mapping} is not closed, or a value holds an unquoted ','",
}


def _duplicate_keys(node: yaml.Node | None) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """Every key that repeats one of its mapping; each node visited once (aliases share them)."""
    seen_nodes: set[int] = set()
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, yaml.Node] = {}
            for key, _value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        yield key, seen[key.value]
                    else:
                        seen[key.value] = key
            stack.extend(reversed([v for _, v in current.value]))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(reversed(current.value))


def validation_findings(
    exc: ValidationError, located: Located, model: type[BaseModel], prefix: Loc = ()
) -> list[Finding]:
    """Turn a pydantic ``ValidationError`` into findings that point at the YAML line.

    ``prefix`` is where ``model``'s data sits inside the file (``("telemetry",)`` for a config block).
    """
    findings = []
    for error in _merged_unions(exc.errors(include_url=False)):
        loc: Loc = prefix + tuple(error["loc"])
        field = ".".join(str(p) for p in loc) or "<root>"
        kind = error["type"]
        if kind == "extra_forbidden":
            known = _field_names(model, tuple(error["loc"])[:-1])
            hint = did_you_mean(str(loc[-1]), known)
            allowed = f"; expected one of: {', '.join(sorted(known))}" if known and not hint else ""
            line, col = located.key_position(loc)
            findings.append(
                Finding(
                    "schema.unknown_key",
                    f"{field}: unknown key{hint}{allowed}",
                    file=located.path,
                    line=line,
                    col=col,
                )
            )
            continue
        # A bad mapping key: point at the key, not at its value.
        line, col = (
            located.key_position(loc[:-1]) if loc[-1:] == ("[key]",) else located.position(loc)
        )
        if kind == "missing":
            message = f"{field}: required field is missing"
        else:
            got = error.get("input")
            shown = f", got {as_yaml(got)}"
            hint = ""
            if kind == "enum" and isinstance(got, str):
                hint = did_you_mean(
                    got, re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
                )
            what = validation_message(str(error["msg"]))
            if kind == "string_pattern_mismatch":
                pattern = str(error.get("ctx", {}).get("pattern", ""))
                what = _pattern_in_words(pattern, got)
                if pattern == _ENV_PREFIX and isinstance(got, str):
                    fixed = re.sub(r"[^A-Z0-9_]", "_", got.strip().upper()).rstrip("_") + "_"
                    hint = f" (did you mean '{fixed}'?)" if re.fullmatch(_ENV_PREFIX, fixed) else ""
            elif loc == ("version",):
                what = "expected 1 (the only registry format version)"
            message = f"{field}: {what}{shown}{hint}{_yaml11_hint(located._node(loc), got)}"
        findings.append(Finding(f"schema.{kind}", message, file=located.path, line=line, col=col))
    return findings


# pydantic tags the error of each member of a union with the member's type: allowed.2.str,
# allowed.2.int... One finding per bad value says every type it could have been.
_UNION_TAG = re.compile(
    r"^(str|int|float|bool|bytes|none|(list|dict|tuple|set)\[.*\]|function-[a-z-]+\[.*\]|"
    r"[A-Z][A-Za-z]*)$"
)


def _merged_unions(errors: list[Any]) -> list[Any]:
    out: list[Any] = []
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        tag = loc[-1] if loc else None
        if not (isinstance(tag, str) and _UNION_TAG.match(tag)) or error["type"] in (
            "extra_forbidden",
            "missing",
        ):
            out.append(error)
            continue
        what = validation_message(str(error["msg"])).removeprefix("expected ")
        first = merged.get(loc[:-1])
        if first is None:
            first = merged[loc[:-1]] = {**error, "loc": loc[:-1], "whats": [what]}
            out.append(first)
        elif what not in first["whats"]:
            first["whats"].append(what)
    for error in merged.values():
        whats = error.pop("whats")
        if len(whats) > 1:
            error["type"] = "wrong_type"
            error["msg"] = f"expected {', '.join(whats[:-1])} or {whats[-1]}"
    return out


_ENV_PREFIX = r"^[A-Z][A-Z0-9_]*_$"
_PATTERN_WORDS = {
    r"^[a-z][a-z0-9_]*$": "expected a lower-case word such as 'per_step' (a-z, 0-9 and _, "
    "starting with a letter)",
    r"^(low|high)$": "expected 'low' or 'high'",
    _ENV_PREFIX: "expected an environment-variable prefix such as 'MYAPP_OTEL_' "
    "(upper-case A-Z, 0-9 and _, starting with a letter, ending with _)",
    r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$": "expected a lower-case dotted attribute key such as "
    "'http.request.method' (words of a-z, 0-9 and _ joined by dots)",
}
_DOTTED_WORDS = (
    "expected a lower-case dotted name such as 'db.query.execute' (words of a-z, 0-9 and _ joined "
    "by dots; the one placeholder is '{algorithm}')"
)
# What YAML 1.1 (PyYAML) reads as a boolean when left unquoted.
_YAML11_BOOLS = frozenset({"yes", "no", "on", "off", "y", "n"})


def _pattern_in_words(pattern: str, got: Any) -> str:
    """The rule a pattern stands for, in words, with the placeholder a name got wrong."""
    if pattern in _PATTERN_WORDS:
        return _PATTERN_WORDS[pattern]
    if "algorithm" not in pattern:
        return f"expected text matching {pattern}"
    words = _DOTTED_WORDS
    wrong = [p for p in re.findall(r"\{([^}]*)\}", str(got)) if p != "algorithm"]
    if wrong:
        words += f"; '{{{wrong[0]}}}' is not a placeholder: write '{{algorithm}}'"
    elif str(got) != str(got).lower():
        words += "; use lower case"
    return words


def _yaml11_hint(node: yaml.Node | None, got: Any) -> str:
    unquoted = isinstance(node, yaml.ScalarNode) and not node.style
    if isinstance(got, bool) and unquoted and node.value.lower() in _YAML11_BOOLS:
        return (
            f" (YAML reads an unquoted {node.value} as {str(got).lower()}; "
            f"quote it, '{node.value}', to mean the word)"
        )
    if isinstance(got, datetime.date) and unquoted:
        return f" (YAML reads an unquoted {node.value} as a date; quote it, '{node.value}', to mean the text)"
    return ""


def _field_names(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys allowed at ``loc`` inside ``model`` (walking nested models, dicts and lists)."""
    current: Any = model
    for part in loc:
        current = _inner_type(current, part)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _inner_type(tp: Any, part: str | int) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return _unwrap(field.annotation)
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    if origin is list and args:
        return _unwrap(args[0])
    return None


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the one model-like type inside."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if (
            origin in (typing.Union, getattr(__import__("types"), "UnionType", None))
            and len(args) == 1
        ):
            tp = args[0]
            continue
        return tp


def load_registry(
    path: str | os.PathLike[str], text: str | None = None
) -> tuple[Registry, Located]:
    """Parse and validate a registry file.

    Returns:
        The validated :class:`Registry` and the located YAML (for cross-check findings).
    Raises:
        SpecError: listing every syntax and schema problem, each with its line.
    """
    with gc_paused(), reading_errors(str(path)):
        return _load_registry(path, text)


def _load_registry(path: str | os.PathLike[str], text: str | None) -> tuple[Registry, Located]:
    located = parse_yaml(path, text)
    if located.root is None:
        raise SpecError(
            [
                Finding(
                    "schema.empty",
                    "the registry file is empty; expected a mapping with 'version', 'groups' and 'spans'",
                    file=located.path,
                    line=1,
                    col=1,
                )
            ]
        )
    if not isinstance(located.data, dict):
        kind = type(located.data).__name__
        raise SpecError(
            [
                Finding(
                    "schema.not_a_mapping",
                    f"the registry must be a mapping of sections, got a {kind}",
                    file=located.path,
                    line=1,
                    col=1,
                )
            ]
        )
    try:
        registry = Registry.model_validate(located.data)
    except ValidationError as exc:
        raise SpecError(validation_findings(exc, located, Registry)) from None
    return registry, located
