"""Static check of Python sources: every ``span("...")`` / ``traced("...")`` name is declared.

The scan parses each file (``ast``, nothing is imported or run) and finds every call whose callee
is the name ``span`` or ``traced`` or an attribute ``.span`` / ``.traced`` (``spanspec.span``,
``timer.span``) with a first positional argument. It then checks, against a compiled
:class:`~spanspec.compile.Spec`:

- ``code.undeclared_span`` (violation): a literal name the registry does not declare;
- ``code.non_literal_name`` (violation): a name that is not a string literal, a module-level
  string constant, or an f-string (``f"rl.{algo}.step"``), so it cannot be checked;
- ``code.templated_name`` (information): an f-string, with the declared names it can stand for
  (none is a ``code.undeclared_span``);
- ``code.undeclared_attribute``, ``code.attribute_type``, ``code.attribute_value`` (violations):
  attribute keys and literal values visible in the call (``**{"rl.iteration": 3}``, ``key=3``);
- ``code.missing_required_attribute`` (improvement): a required attribute absent from a call whose
  attributes are all visible (it may still be set on the span later);
- ``code.unused_span`` (improvement; a violation for names matching ``require_used`` globs): a
  declared span no scanned call uses, reported at its declaration in the registry.

A call inside a function itself named ``span`` or ``traced`` that passes on one of that
function's parameters is a wrapper forwarding its caller's name and is not checked (the caller's
call is). A call with ``# spanspec: ignore`` on one of its lines is skipped.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanspec.compile import ALGORITHM_PLACEHOLDER, Spec
from spanspec.findings import Finding, a_type, did_you_mean

if TYPE_CHECKING:
    from spanspec.loader import Located

__all__ = [
    "IGNORE_COMMENT",
    "SPAN_FUNCTIONS",
    "CodeScan",
    "SpanCall",
    "check_calls",
    "iter_python_files",
    "scan_paths",
    "scan_source",
]

SPAN_FUNCTIONS = frozenset(("span", "traced"))
IGNORE_COMMENT = "spanspec: ignore"
_SKIP_DIRS = frozenset(("__pycache__", "node_modules", "site-packages"))
UNKNOWN: Any = object()  # an attribute value not visible statically


@dataclass(frozen=True)
class SpanCall:
    """One ``span(...)`` / ``traced(...)`` call found in a source file.

    Exactly one of ``name`` (a literal, or a resolved module constant), ``pattern`` (a regular
    expression built from an f-string) and ``expression`` (the source of any other first
    argument) is set. ``attributes`` maps each statically visible attribute key to its literal
    value, or to :data:`UNKNOWN`; ``dynamic_attributes`` is true when ``**mapping`` hides some.
    """

    function: str
    file: str
    line: int
    col: int
    name: str | None = None
    pattern: str | None = None
    expression: str | None = None
    source: str = ""
    attributes: tuple[tuple[str, Any], ...] = ()
    dynamic_attributes: bool = False


@dataclass
class CodeScan:
    """Every call found, and findings for files that could not be read or parsed."""

    calls: list[SpanCall] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def iter_python_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[tuple[str, Path | None]]:
    """Yield ``(display name, path)`` for each ``.py`` file under ``paths``, sorted per folder.

    A path given explicitly is yielded whatever its suffix; folders are searched recursively,
    skipping hidden folders, ``__pycache__``, ``node_modules`` and ``site-packages``. A path that
    does not exist is yielded with ``None``.
    """
    for given in paths:
        path = Path(given)
        if path.is_file():
            yield str(given), path
        elif path.is_dir():
            for found in sorted(path.rglob("*.py")):
                rel = found.relative_to(path).parts
                if any(p.startswith(".") or p in _SKIP_DIRS for p in rel[:-1]):
                    continue
                yield str(found), found
        else:
            yield str(given), None


def scan_paths(paths: Iterable[str | os.PathLike[str]]) -> CodeScan:
    """Scan every Python file under ``paths``.

    Returns:
        A :class:`CodeScan`; a missing path, an unreadable file or a syntax error is a finding
        (``file.unreadable``, ``code.syntax``), never an exception.
    """
    scan = CodeScan()
    for name, path in iter_python_files(paths):
        if path is None:
            scan.findings.append(Finding("file.unreadable", "no such file or directory", file=name))
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            scan.findings.append(
                Finding("file.unreadable", f"cannot read file: {reason}", file=name)
            )
            continue
        one = scan_source(text, name)
        scan.calls.extend(one.calls)
        scan.findings.extend(one.findings)
        scan.files.append(name)
    return scan


def scan_source(text: str, file: str = "<string>") -> CodeScan:
    """Scan one module's source text.

    Returns:
        A :class:`CodeScan` of its calls, or a ``code.syntax`` finding when it does not parse.
    """
    scan = CodeScan(files=[file])
    try:
        tree = ast.parse(text, filename=file)
    except SyntaxError as exc:
        scan.findings.append(
            Finding(
                "code.syntax",
                f"cannot parse: {exc.msg}",
                file=file,
                line=exc.lineno or 1,
                col=exc.offset or 1,
            )
        )
        return scan
    visitor = _Visitor(text, file, _module_constants(tree))
    visitor.visit(tree)
    scan.calls = visitor.calls
    return scan


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments (the last one wins)."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out[target.id] = value.value
            else:
                out.pop(target.id, None)
    return out


_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


class _Visitor(ast.NodeVisitor):
    def __init__(self, text: str, file: str, constants: dict[str, str]) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.file = file
        self.constants = constants
        self.calls: list[SpanCall] = []
        self.functions: list[tuple[str, frozenset[str]]] = []

    def _visit_function(self, node: _FunctionNode) -> None:
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        name = getattr(node, "name", "<lambda>")
        self.functions.append((name, frozenset(p.arg for p in params)))
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        callee = (
            func.id
            if isinstance(func, ast.Name)
            else func.attr
            if isinstance(func, ast.Attribute)
            else None
        )
        if callee not in SPAN_FUNCTIONS or not node.args:
            return
        first = node.args[0]
        if isinstance(first, ast.Constant) and not isinstance(first.value, str):
            return  # not a span name (e.g. re.Match.span(1))
        if self._ignored(node) or self._forwarded(first):
            return
        source = ast.get_source_segment(self.text, first) or ast.unparse(first)
        common: dict[str, Any] = {
            "function": callee,
            "file": self.file,
            "line": first.lineno,
            "col": first.col_offset + 1,
            "source": source,
        }
        attributes, dynamic = _attributes(node)
        common.update(attributes=attributes, dynamic_attributes=dynamic)
        if isinstance(first, ast.Constant):
            self.calls.append(SpanCall(name=first.value, **common))
        elif isinstance(first, ast.Name) and first.id in self.constants:
            self.calls.append(SpanCall(name=self.constants[first.id], **common))
        elif isinstance(first, ast.JoinedStr):
            self.calls.append(SpanCall(pattern=_fstring_pattern(first), **common))
        else:
            self.calls.append(SpanCall(expression=source, **common))

    def _ignored(self, node: ast.Call) -> bool:
        end = node.end_lineno or node.lineno
        return any(IGNORE_COMMENT in line for line in self.lines[node.lineno - 1 : end])

    def _forwarded(self, first: ast.expr) -> bool:
        if not isinstance(first, ast.Name):
            return False
        return any(
            fname in SPAN_FUNCTIONS and first.id in params for fname, params in self.functions
        )


def _attributes(call: ast.Call) -> tuple[tuple[tuple[str, Any], ...], bool]:
    """Statically visible attribute keys and literal values of a call, and whether any are hidden."""
    out: list[tuple[str, Any]] = []
    dynamic = False
    for kw in call.keywords:
        if kw.arg == "links":  # span(..., links=[...]) is a parameter, not an attribute
            continue
        if kw.arg is not None:
            out.append((kw.arg, _literal(kw.value)))
        elif isinstance(kw.value, ast.Dict):
            for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out.append((key.value, _literal(value)))
                else:
                    dynamic = True  # {**more} or a computed key
        else:
            dynamic = True
    return tuple(out), dynamic


def _literal(node: ast.expr) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN
    return list(value) if isinstance(value, tuple) else value


def _fstring_pattern(node: ast.JoinedStr) -> str:
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(re.escape(str(value.value)))
        else:
            parts.append(".+?")
    return "".join(parts)


# -- checking the calls against a spec ------------------------------------------------------------


def check_calls(
    spec: Spec,
    scan: CodeScan,
    *,
    located: Located | None = None,
    require_used: Sequence[str] = (),
    report_unused: bool = True,
) -> list[Finding]:
    """Check the scanned calls against ``spec``; see the module docstring for each finding id.

    ``located`` (the registry's parsed YAML) lets unused-span findings point at the declaration;
    without it they point at the registry file. ``require_used`` globs (``rl.grpo.*``) turn
    unused spans they match into violations.

    Returns:
        The findings, the scan's own findings first.
    """
    findings = list(scan.findings)
    used: set[str] = set()
    names = list(spec.spans)
    suggestions = [*names, *{e.template for e in spec.spans.values()}]
    for call in scan.calls:
        where = {"file": call.file, "line": call.line, "col": call.col}
        if call.name is not None:
            if call.name not in spec.spans:
                hint = did_you_mean(call.name, suggestions)
                extra = ""
                if ALGORITHM_PLACEHOLDER in call.name:
                    extra = f"; {ALGORITHM_PLACEHOLDER} is expanded in the registry, use a concrete name"
                findings.append(
                    Finding(
                        "code.undeclared_span",
                        f"{call.function}(): span '{call.name}' is not declared in the registry{hint}{extra}",
                        **where,
                    )
                )
                continue
            matched = [call.name]
        elif call.pattern is not None:
            regex = re.compile(call.pattern, re.DOTALL)
            matched = [n for n in names if regex.fullmatch(n)]
            if not matched:
                findings.append(
                    Finding(
                        "code.undeclared_span",
                        f"{call.function}(): no declared span matches {call.source}",
                        **where,
                    )
                )
                continue
            shown = ", ".join(matched[:6]) + (
                f" and {len(matched) - 6} more" if len(matched) > 6 else ""
            )
            findings.append(
                Finding(
                    "code.templated_name",
                    f"{call.function}(): {call.source} can stand for {len(matched)} declared "
                    f"span(s): {shown}",
                    level="information",
                    **where,
                )
            )
        else:
            findings.append(
                Finding(
                    "code.non_literal_name",
                    f"{call.function}(): the span name {call.expression} is not a string literal, "
                    "so it cannot be checked; use a literal (or an f-string over a declared "
                    f"template), or mark a deliberate wrapper with '# {IGNORE_COMMENT}'",
                    **where,
                )
            )
            continue
        used.update(matched)
        findings.extend(_attribute_findings(spec, call, matched))
    if report_unused:
        findings.extend(_unused(spec, used, located, require_used))
    return findings


def _attribute_findings(spec: Spec, call: SpanCall, matched: list[str]) -> list[Finding]:
    findings: list[Finding] = []
    where = {"file": call.file, "line": call.line, "col": call.col}
    label = f"span '{matched[0]}'" if len(matched) == 1 else f"spans {call.source}"
    for key, value in call.attributes:
        lacking = [n for n in matched if key not in spec.spans[n].attributes]
        if lacking:
            hint = did_you_mean(key, spec.spans[lacking[0]].attributes)
            whom = label if len(lacking) == len(matched) else f"span(s) {', '.join(lacking[:4])}"
            findings.append(
                Finding(
                    "code.undeclared_attribute",
                    f"{call.function}(): attribute '{key}' is not declared for {whom}{hint}",
                    **where,
                )
            )
            continue
        if value is UNKNOWN:
            continue
        decl = spec.spans[matched[0]].attributes[key]
        if not replace(decl, allowed=None).accepts(value):
            findings.append(
                Finding(
                    "code.attribute_type",
                    f"{call.function}(): attribute '{key}' of {label} must be {a_type(decl.type)}, "
                    f"got {type(value).__name__} {value!r}",
                    **where,
                )
            )
        elif not decl.accepts(value):
            allowed = ", ".join(sorted(map(str, decl.allowed or ())))
            findings.append(
                Finding(
                    "code.attribute_value",
                    f"{call.function}(): attribute '{key}' of {label} = {value!r} is not one of "
                    f"the declared values: {allowed}",
                    **where,
                )
            )
    if not call.dynamic_attributes:
        given = {k for k, _ in call.attributes}
        missing = sorted({k for n in matched for k in spec.spans[n].required} - given)
        if missing:
            findings.append(
                Finding(
                    "code.missing_required_attribute",
                    f"{call.function}(): {label} requires {', '.join(repr(k) for k in missing)}, "
                    "not given here (set it on the span if it is known only later)",
                    level="improvement",
                    **where,
                )
            )
    return findings


def _unused(
    spec: Spec, used: set[str], located: Located | None, require_used: Sequence[str]
) -> list[Finding]:
    findings: list[Finding] = []
    for pattern in require_used:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in spec.spans):
            findings.append(
                Finding(
                    "code.require_used_unmatched",
                    f"--require-used {pattern!r} matches no declared span",
                    file="<command line>",
                )
            )
    positions = _declaration_positions(located)
    # (template, required glob or "") -> unused concrete names, in registry order
    unused: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, entry in spec.spans.items():
        if name in used:
            continue
        glob = next((p for p in require_used if fnmatch.fnmatchcase(name, p)), "")
        unused[(entry.template, glob)].append(name)
    for (template, glob), missing in unused.items():
        line, col = positions.get(template, (0, 0))
        if ALGORITHM_PLACEHOLDER in template:
            algorithms = [spec.spans[n].algorithm or n for n in missing]
            what = f"span '{template}' is declared but never used in the scanned code for: {', '.join(algorithms)}"
        else:
            what = f"span '{template}' is declared but never used in the scanned code"
        findings.append(
            Finding(
                "code.unused_span",
                what + (f" (required by --require-used {glob!r})" if glob else ""),
                level="violation" if glob else "improvement",
                file=located.path if located else spec.source,
                line=line,
                col=col,
            )
        )
    return findings


def _declaration_positions(located: Located | None) -> dict[str, tuple[int, int]]:
    """Span name (or template) as written in the registry -> (line, col) of its ``name``."""
    if located is None or not isinstance(located.data, dict):
        return {}
    out: dict[str, tuple[int, int]] = {}
    for i, decl in enumerate(located.data.get("spans") or []):
        if isinstance(decl, dict) and isinstance(decl.get("name"), str):
            out.setdefault(decl["name"], located.position(("spans", i, "name")))
    return out
