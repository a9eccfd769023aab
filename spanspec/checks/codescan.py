"""Static check of Python sources: every ``span("...")`` / ``traced("...")`` name is declared.

The scan parses each file (``ast``, nothing is imported or run) and finds every call whose callee
is the name ``span`` or ``traced`` or an attribute ``.span`` / ``.traced`` (``spanspec.span``,
``timer.span``) with a first positional argument. Then
:func:`spanspec.checks.codecheck.check_calls` checks them against a compiled :class:`~spanspec.spec.Spec`:

- ``code.undeclared_span`` (violation): a literal name the registry does not declare;
- ``code.non_literal_name`` (violation): a name that is not a string literal, a module-level
  string constant, or an f-string (``f"app.{kind}.step"``), so it cannot be checked;
- ``code.templated_name`` (information): an f-string, with the declared names it can stand for
  (none is a ``code.undeclared_span``);
- ``code.undeclared_attribute``, ``code.attribute_type``, ``code.attribute_value`` (violations):
  attribute keys and literal values visible in the call (``**{"app.batch.index": 3}``, ``key=3``);
- ``code.missing_required_attribute`` (improvement): a required attribute absent from a call whose
  attributes are all visible (it may still be set on the span later);
- late attributes: ``annotate(s, **{...})`` where ``s`` is bound by ``with span("name") as s`` (or
  ``timer.span(...) as s``) in the same function is checked like the attributes of that span
  call; ``code.unresolved_annotate`` (information): an ``annotate`` whose span is not bound so,
  whose keys cannot be checked;
- ``code.unused_span`` (improvement; a violation for names matching ``require_used`` globs): a
  declared span no scanned call uses, reported at its declaration in the registry.

A call inside a function itself named ``span`` or ``traced`` that passes on one of that
function's parameters is a wrapper forwarding its caller's name and is not checked (the caller's
call is). A call with ``# spanspec: ignore`` on one of its lines is skipped.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanspec.files import broken_link, walk
from spanspec.findings import Finding

if TYPE_CHECKING:
    pass

__all__ = [
    "IGNORE_COMMENT",
    "SPAN_FUNCTIONS",
    "CodeScan",
    "SpanCall",
    "iter_python_files",
    "scan_paths",
    "scan_source",
]

SPAN_FUNCTIONS = frozenset(("span", "traced"))
ANNOTATE_FUNCTION = "annotate"
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
    late: bool = False
    """An ``annotate(span, ...)`` call: its attributes are set on the span named here, later."""


@dataclass
class CodeScan:
    """Every call found, and findings for files that could not be read or parsed."""

    calls: list[SpanCall] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def iter_python_files(
    paths: Iterable[str | os.PathLike[str]], exclude: Collection[Path] = ()
) -> Iterator[tuple[str, Path | Finding | None]]:
    """Yield ``(display name, path)`` for each ``.py`` file under ``paths``, sorted per folder.

    A path given explicitly is yielded whatever its suffix; folders are searched recursively,
    skipping hidden folders, ``__pycache__``, ``node_modules``, ``site-packages`` and the folders
    in ``exclude`` (as found below a given folder; linked folders are not entered). A path that does not exist is yielded with ``None``; one that
    cannot be read (a folder that cannot be listed, a link that loops) with its finding.
    """
    for given in paths:
        path = Path(given)
        broken = broken_link(path)
        if broken is not None:
            yield str(given), broken
        elif path.is_file():
            yield str(given), path
        elif path.is_dir():
            for found, problem in walk(path, (".py",), _SKIP_DIRS):
                if not any(found.is_relative_to(folder) for folder in exclude):
                    yield str(found), problem if problem is not None else found
        elif path.exists():  # a FIFO or a device: reading it might never end
            yield str(given), Finding("file.unreadable", "not a regular file", file=str(given))
        else:
            yield str(given), None


def scan_paths(paths: Iterable[str | os.PathLike[str]], exclude: Collection[Path] = ()) -> CodeScan:
    """Scan every Python file under ``paths``, leaving out the folders in ``exclude``.

    Returns:
        A :class:`CodeScan`; a missing path, an unreadable file or a syntax error is a finding
        (``file.unreadable``, ``code.syntax``), never an exception.
    """
    scan = CodeScan()
    for name, path in iter_python_files(paths, exclude):
        if path is None:
            scan.findings.append(Finding("file.unreadable", "no such file or directory", file=name))
            continue
        if isinstance(path, Finding):
            scan.findings.append(path)
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
    except (RecursionError, MemoryError):
        scan.findings.append(_too_deep(file))
        return scan
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
    try:
        visitor = _Visitor(text, file, _module_constants(tree))
        visitor.visit(tree)
    except RecursionError:
        scan.findings.append(_too_deep(file))
        return scan
    scan.calls = visitor.calls
    scan.findings.extend(visitor.unresolved)
    return scan


def _too_deep(file: str) -> Finding:
    return Finding(
        "code.too_deep",
        "cannot analyse: the code is nested too deeply for Python's parser (the other files "
        "are still checked)",
        file=file,
        line=1,
        col=1,
    )


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
        # Per function: variable -> the first argument of the span call bound to it by `with`.
        self.bound: list[dict[str, ast.expr]] = [{}]
        self.unresolved: list[Finding] = []

    def _visit_function(self, node: _FunctionNode) -> None:
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        name = getattr(node, "name", "<lambda>")
        self.functions.append((name, frozenset(p.arg for p in params)))
        self.bound.append({})
        self.generic_visit(node)
        self.bound.pop()
        self.functions.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def _visit_with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            call, var = item.context_expr, item.optional_vars
            if isinstance(call, ast.Call) and call.args and _callee(call) in SPAN_FUNCTIONS:
                if isinstance(var, ast.Name):
                    self.bound[-1][var.id] = call.args[0]
        self.generic_visit(node)

    visit_With = _visit_with
    visit_AsyncWith = _visit_with

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        callee = _callee(node)
        if callee == ANNOTATE_FUNCTION and node.args:
            self._annotate(node)
            return
        if callee not in SPAN_FUNCTIONS or not node.args:
            return
        first = node.args[0]
        if isinstance(first, ast.Constant) and not isinstance(first.value, str):
            return  # not a span name (e.g. re.Match.span(1))
        if self._ignored(node) or self._forwarded(first):
            return
        self._record(callee, node, first)

    def _annotate(self, node: ast.Call) -> None:
        """``annotate(s, ...)``: checked as attributes of the span ``s`` was bound to."""
        if self._ignored(node):
            return
        target = node.args[0]
        first = self.bound[-1].get(target.id) if isinstance(target, ast.Name) else None
        if first is None:
            source = ast.get_source_segment(self.text, target) or ast.unparse(target)
            self.unresolved.append(
                Finding(
                    "code.unresolved_annotate",
                    f"annotate(): cannot tell which span {source} is (bind it with "
                    "`with span(...) as name` in the same function), so its keys are not checked",
                    level="information",
                    file=self.file,
                    line=target.lineno,
                    col=target.col_offset + 1,
                )
            )
            return
        self._record(ANNOTATE_FUNCTION, node, first, at=target, late=True)

    def _record(
        self,
        callee: str,
        node: ast.Call,
        first: ast.expr,
        at: ast.expr | None = None,
        late: bool = False,
    ) -> None:
        source = ast.get_source_segment(self.text, first) or ast.unparse(first)
        where = at or first
        common: dict[str, Any] = {
            "function": callee,
            "file": self.file,
            "line": where.lineno,
            "col": where.col_offset + 1,
            "source": source,
            "late": late,
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


def _callee(call: ast.Call) -> str | None:
    """``span`` for ``span(...)``, ``spanspec.span(...)`` and ``timer.span(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


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
