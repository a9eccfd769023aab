"""Span calls found by :mod:`spanspec.checks.codescan`, checked against a compiled registry.

The findings (``code.undeclared_span``, ``code.attribute_type``, ``code.unused_span``...) are
listed in :mod:`spanspec.checks.codescan`, which finds the calls; this module judges them.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from spanspec.checks.codescan import IGNORE_COMMENT, UNKNOWN, CodeScan, SpanCall
from spanspec.findings import Finding, a_type, did_you_mean
from spanspec.spec import ALGORITHM_PLACEHOLDER, Spec

if TYPE_CHECKING:
    from spanspec.registry.loader import Located

__all__ = ["check_calls", "emitted_names"]


def emitted_names(spec: Spec, scan: CodeScan) -> frozenset[str]:
    """Returns the declared span names that some scanned call can emit (f-strings count for
    every declared name they can stand for)."""
    names = list(spec.spans)
    return frozenset(n for call in scan.calls for n in _declared_matches(call, spec, names))


def _declared_matches(call: SpanCall, spec: Spec, names: list[str]) -> list[str]:
    if call.name is not None:
        return [call.name] if call.name in spec.spans else []
    if call.pattern is not None:
        regex = re.compile(call.pattern, re.DOTALL)
        return [n for n in names if regex.fullmatch(n)]
    return []


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
    without it they point at the registry file. ``require_used`` globs (``pipeline.*``) turn
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
        if call.late:  # annotate(): the span call it refers to reports its own name
            matched = (
                [call.name]
                if call.name in spec.spans
                else _declared_matches(call, spec, names)
                if call.pattern is not None
                else []
            )
            if matched:
                findings.extend(_attribute_findings(spec, call, matched))
            continue
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
            matched = _declared_matches(call, spec, names)
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
    if not call.dynamic_attributes and not call.late:
        given = {k for k, _ in call.attributes}
        missing = sorted(
            {k for n in matched for k in spec.spans[n].required - spec.spans[n].constants.keys()}
            - given
        )
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
