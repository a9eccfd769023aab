"""Live check: hold the spans a program emitted against the registry.

For each span read from the file exporter's ``traces.jsonl`` (see :mod:`spanspec.traces.otlp_json`):
an undeclared name, a missing required attribute, an undeclared attribute, a value of the wrong
type or outside the declared set, a sensitive value that was not redacted, and a span whose group
was switched off are violations. Coverage per group (declared spans seen / declared) is
information, or a violation for a group named in ``require_coverage``.

A problem seen many times is one finding, at its first occurrence, with the count.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from spanspec.findings import Finding, SpecError, a_type, did_you_mean
from spanspec.spec import GROUPS_RESOURCE_ATTRIBUTE, REDACTED, AttributeDef, Spec
from spanspec.traces.fingerprints import Fingerprints
from spanspec.traces.otlp_json import SpanRecord

__all__ = [
    "GROUPS_RESOURCE_ATTRIBUTE",
    "LIBRARY_ATTRIBUTE_PREFIX",
    "SCOPE",
    "Coverage",
    "LiveReport",
    "live_check",
]

# The resource attribute a process may set to the comma list of groups it enabled.
# Attributes spanspec itself adds (``spanspec.truncated``); never declared in a registry.
LIBRARY_ATTRIBUTE_PREFIX = "spanspec."
# The instrumentation scope of spans started by spanspec.runtime; others are not checked.
SCOPE = "spanspec"


@dataclass(frozen=True)
class Coverage:
    """Declared spans of one group, and which of them the files hold."""

    group: str
    declared: tuple[str, ...]
    seen: tuple[str, ...]
    state: str  # "on", "off" or "unknown"
    emitted: int  # spans of this group in the files

    @property
    def fraction(self) -> float:
        """Seen / declared (1.0 for a group that declares nothing)."""
        return len(self.seen) / len(self.declared) if self.declared else 1.0

    @property
    def missing(self) -> tuple[str, ...]:
        """Declared spans not seen, in registry order."""
        seen = set(self.seen)
        return tuple(n for n in self.declared if n not in seen)


@dataclass
class LiveReport:
    """Findings of :func:`live_check`, the coverage table, and what was checked."""

    findings: list[Finding] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    spans_checked: int = 0
    spans_skipped: int = 0
    algorithms_seen: tuple[str, ...] = ()
    enabled_groups: frozenset[str] | None = None
    groups_source: str = ""

    def coverage_table(self) -> str:
        """Return the coverage as an aligned text table."""
        rows = [("group", "state", "seen", "declared", "spans", "missing")]
        for c in self.coverage:
            missing = ", ".join(c.missing[:3]) + (" ..." if len(c.missing) > 3 else "")
            rows.append(
                (c.group, c.state, str(len(c.seen)), str(len(c.declared)), str(c.emitted), missing)
            )
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = []
        for r in rows:
            cells = [
                f"{r[i]:<{widths[i]}}" if i in (0, 1) else f"{r[i]:>{widths[i]}}" for i in range(5)
            ]
            lines.append(("  ".join(cells) + "  " + r[5]).rstrip())
        return "\n".join(lines)


class _Collector:
    """Findings keyed by (id, subject): the first occurrence, and how often it was seen."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], Finding] = {}
        self.count: Counter[tuple[str, str]] = Counter()

    def add(self, span: SpanRecord, id_: str, subject: str, message: str) -> None:
        key = (id_, subject)
        self.count[key] += 1
        if key not in self.first:
            self.first[key] = Finding(id_, message, file=span.file, line=span.line, col=1)

    def findings(self) -> list[Finding]:
        out = []
        for key, f in self.first.items():
            n = self.count[key]
            message = f.message + (f" (seen {n} times)" if n > 1 else "")
            out.append(dataclasses.replace(f, message=message))
        return out


def live_check(
    spec: Spec,
    spans: Iterable[SpanRecord],
    *,
    groups: str | None = None,
    require_coverage: Mapping[str, float] | None = None,
    all_scopes: bool = False,
) -> LiveReport:
    """Check emitted spans against ``spec``.

    ``groups`` is the group expression the run used; when None, each span's resource attribute
    ``spanspec.groups`` (a comma list of enabled groups) is used if present, else the
    group-off check is skipped (an information finding says so). ``require_coverage`` maps a
    group (or a glob of groups) to the least fraction of its declared spans that must be seen.
    Spans of other instrumentation scopes (not ``spanspec``) are counted but not checked unless
    ``all_scopes``.

    Returns:
        The :class:`LiveReport`.

    Raises:
        SpecError: when ``groups`` is not a valid expression for ``spec``.
    """
    report = LiveReport()
    fixed_groups = spec.resolve(groups) if groups is not None else None
    if fixed_groups is not None:
        report.enabled_groups, report.groups_source = fixed_groups, f"--groups {groups}"
    problems = _Collector()
    seen: set[str] = set()
    emitted: Counter[str] = Counter()
    algorithms: list[str] = []
    other_scopes: Counter[str] = Counter()
    resource_groups_cache: dict[str, frozenset[str] | None] = {}
    any_groups_known = fixed_groups is not None
    names = list(spec.spans)
    ids = Fingerprints()

    for span in spans:
        if not all_scopes and span.scope not in (SCOPE, ""):
            other_scopes[span.scope] += 1
            report.spans_skipped += 1
            continue
        report.spans_checked += 1
        _check_times(span, ids, problems)
        entry = spec.spans.get(span.name)
        if entry is None:
            problems.add(
                span,
                "live.undeclared_span",
                span.name,
                f"span '{span.name}' is not declared in the registry{did_you_mean(span.name, names)}",
            )
            continue
        seen.add(span.name)
        emitted[entry.group] += 1
        if entry.algorithm and entry.algorithm not in algorithms:
            algorithms.append(entry.algorithm)

        enabled = fixed_groups
        if enabled is None:
            enabled = _resource_groups(spec, span, resource_groups_cache, problems)
            any_groups_known = any_groups_known or enabled is not None
        if enabled is not None and entry.group not in enabled:
            problems.add(
                span,
                "live.group_off",
                span.name,
                f"span '{span.name}' was emitted although its group '{entry.group}' was off",
            )

        missing = sorted(entry.required - set(span.attributes))
        if missing and span.dropped_attributes:
            # Not the code's fault: the SDK's limits dropped them (the span says how many).
            problems.add(
                span,
                "live.attributes_dropped_by_limit",
                span.name,
                f"span '{span.name}': required attribute(s) {', '.join(missing)} missing and "
                f"droppedAttributesCount={span.dropped_attributes}: dropped by an OpenTelemetry "
                "attribute limit (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT or OTEL_ATTRIBUTE_COUNT_LIMIT); "
                "raise or unset the limit",
            )
            missing = []
        for key in missing:
            problems.add(
                span,
                "live.missing_attribute",
                f"{span.name}/{key}",
                f"span '{span.name}': required attribute '{key}' is missing",
            )
        for key, value in span.attributes.items():
            if key.startswith(LIBRARY_ATTRIBUTE_PREFIX):
                continue
            decl = entry.attributes.get(key)
            if decl is None:
                hint = did_you_mean(key, entry.attributes)
                problems.add(
                    span,
                    "live.undeclared_attribute",
                    f"{span.name}/{key}",
                    f"span '{span.name}': attribute '{key}' is not declared for it{hint}",
                )
                continue
            _check_value(span, key, value, decl, problems)

    report.findings = problems.findings()
    if fixed_groups is None and not any_groups_known:
        report.findings.append(
            Finding(
                "live.groups_unknown",
                "the enabled groups are unknown (no --groups, and no "
                f"'{GROUPS_RESOURCE_ATTRIBUTE}' resource attribute), so spans of switched-off "
                "groups were not looked for",
                level="information",
                file="<live-check>",
            )
        )
    elif fixed_groups is None:
        report.groups_source = f"resource attribute {GROUPS_RESOURCE_ATTRIBUTE}"
        known = [g for g in resource_groups_cache.values() if g is not None]
        report.enabled_groups = frozenset().union(*known) if known else None
    if other_scopes:
        listed = ", ".join(f"{s or '<none>'} ({n})" for s, n in sorted(other_scopes.items()))
        report.findings.append(
            Finding(
                "live.other_scopes",
                f"{sum(other_scopes.values())} spans of other instrumentation scopes were not "
                f"checked: {listed}",
                level="information",
                file="<live-check>",
            )
        )
    report.algorithms_seen = tuple(algorithms)
    report.coverage = _coverage(spec, seen, emitted, algorithms, report.enabled_groups)
    report.findings.extend(_coverage_findings(report, require_coverage or {}))
    return report


_MAX_TIME = 2**64 - 1  # OTLP times are fixed64 nanoseconds


def _check_times(span: SpanRecord, ids: Fingerprints, problems: _Collector) -> None:
    """Times no clock gives (zero, negative, past 2^64), an end before its start, and a span id
    seen before in the same trace."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    for key_name, value in (("startTimeUnixNano", start), ("endTimeUnixNano", end)):
        if value <= 0 or value > _MAX_TIME:
            problems.add(
                span,
                "live.impossible_time",
                f"{span.name}/{key_name}",
                f"span '{span.name}' ({span.span_id}): {key_name} {value} is not a time (expected "
                "Unix nanoseconds between 1 and 2^64-1)",
            )
            return
    if end < start:
        problems.add(
            span,
            "live.end_before_start",
            span.name,
            f"span '{span.name}' ({span.span_id}) ends {(start - end) / 1e9:.3f} s before it "
            "starts",
        )
    if ids.add((span.trace_id, span.span_id)):
        problems.add(
            span,
            "live.duplicate_span_id",
            span.span_id,
            f"span id {span.span_id} of trace {span.trace_id} appears twice (span "
            f"'{span.name}'); each span needs its own id",
        )


def _resource_groups(
    spec: Spec,
    span: SpanRecord,
    cache: dict[str, frozenset[str] | None],
    problems: _Collector,
) -> frozenset[str] | None:
    raw = span.resource.get(GROUPS_RESOURCE_ATTRIBUTE)
    if raw is None:
        return None
    text = ",".join(map(str, raw)) if isinstance(raw, list) else str(raw)
    if text not in cache:
        try:
            cache[text] = spec.resolve(text)
        except SpecError as exc:
            cache[text] = None
            for f in exc.findings:
                problems.add(
                    span,
                    "live.resource_groups",
                    text,
                    f"resource attribute {GROUPS_RESOURCE_ATTRIBUTE}={text!r}: {f.message}",
                )
    return cache[text]


def _check_value(
    span: SpanRecord, key: str, value: object, decl: AttributeDef, problems: _Collector
) -> None:
    subject = f"{span.name}/{key}"
    if decl.sensitive:
        if value != REDACTED:
            problems.add(
                span,
                "live.sensitive_not_redacted",
                subject,
                f"span '{span.name}': attribute '{key}' is sensitive but its value was "
                f"exported unredacted",
            )
        return
    untyped = dataclasses.replace(decl, allowed=None)
    if not untyped.accepts(value):
        problems.add(
            span,
            "live.attribute_type",
            subject,
            f"span '{span.name}': attribute '{key}' must be {a_type(decl.type)}, "
            f"got {_kind(value)} {value!r}",
        )
    elif decl.allowed is not None and not decl.accepts(value):
        allowed = ", ".join(sorted(map(str, decl.allowed)))
        problems.add(
            span,
            "live.attribute_value",
            subject,
            f"span '{span.name}': attribute '{key}' = {value!r} is not one of the declared "
            f"values: {allowed}",
        )


def _kind(value: object) -> str:
    if isinstance(value, list):
        inner = sorted({type(v).__name__ for v in value})
        return f"list of {'/'.join(inner) or 'nothing'}"
    return type(value).__name__


def _coverage(
    spec: Spec,
    seen: set[str],
    emitted: Counter[str],
    algorithms: Sequence[str],
    enabled: frozenset[str] | None,
) -> list[Coverage]:
    """Coverage per group. Template expansions for algorithms the files never show are left out
    of the declared count (a run of one ``{algorithm}`` cannot emit another's spans), and so are
    literal names holding such an algorithm's name."""
    declared: dict[str, list[str]] = defaultdict(list)
    known = {e.algorithm for e in spec.spans.values() if e.algorithm}
    for name, entry in spec.spans.items():
        if algorithms and entry.algorithm and entry.algorithm not in algorithms:
            continue
        # A literal name holding another algorithm's name (app.train.score in a run that shows
        # only algorithm "eval") is that algorithm's span, as a template expansion would be.
        named = known.intersection(name.split(".")) if algorithms and not entry.algorithm else ()
        if named and not named.intersection(algorithms):
            continue
        declared[entry.group].append(name)
    out = []
    for group in spec.groups:
        names = tuple(declared.get(group, ()))
        state = "unknown" if enabled is None else ("on" if group in enabled else "off")
        out.append(
            Coverage(group, names, tuple(n for n in names if n in seen), state, emitted[group])
        )
    return out


def _coverage_findings(report: LiveReport, required: Mapping[str, float]) -> list[Finding]:
    findings = []
    scope = (
        f" (algorithms seen: {', '.join(report.algorithms_seen)})" if report.algorithms_seen else ""
    )
    for c in report.coverage:
        needed = max(
            (f for pattern, f in required.items() if fnmatch.fnmatchcase(c.group, pattern)),
            default=None,
        )
        if c.declared:
            text = f"group '{c.group}' ({c.state}): {len(c.seen)} of {len(c.declared)} declared spans seen{scope}"
        else:
            text = f"group '{c.group}' ({c.state}): no declared spans{' for the algorithms seen' if scope else ''}{scope}"
        if c.missing and len(c.missing) <= 5:
            text += f"; not seen: {', '.join(c.missing)}"
        elif c.missing:
            text += f"; not seen: {', '.join(c.missing[:5])} and {len(c.missing) - 5} more"
        if needed is not None and c.fraction < needed:
            findings.append(
                Finding(
                    "live.coverage",
                    f"{text}; at least {needed:.0%} required",
                    file="<live-check>",
                )
            )
        else:
            findings.append(
                Finding("live.coverage", text, level="information", file="<live-check>")
            )
    return findings
