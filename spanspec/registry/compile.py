"""Validated schema -> :class:`~spanspec.spec.Spec`: the last step of reading a registry.

Compiling expands ``{algorithm}`` templates, checks the cross-references the schema cannot see on
its own (undeclared groups and attributes, preset cycles, duplicate names, metrics fed by unknown
spans, conventions naming what is not declared), and collects every problem as a finding before raising. Each section of
the registry has its own small builder below; they share one :class:`_Report`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from spanspec._coerce import describe
from spanspec.findings import Finding, Level, SpecError, a_type, as_yaml, did_you_mean
from spanspec.registry.loader import Located, gc_paused
from spanspec.registry.schema import ConventionsDecl, MetricDecl, Registry, SpanDecl
from spanspec.spec import (
    ALGORITHM_PLACEHOLDER,
    AttributeDef,
    Conventions,
    GroupDef,
    MetricDef,
    SpanEntry,
    Spec,
    parse_duration,
)

__all__ = ["compile_registry"]

Loc = tuple[str | int, ...]


def compile_registry(registry: Registry, located: Located | None = None) -> Spec:
    """Check cross-references and build the frozen :class:`Spec`.

    Raises:
        SpecError: with every violation found (improvements alone do not raise).
    """
    with gc_paused():
        return _compile(registry, located or Located("<registry>", None, None))


class _Report:
    """Collects findings, each placed at the YAML node of its location."""

    def __init__(self, located: Located) -> None:
        self.located = located
        self.findings: list[Finding] = []

    def __call__(self, id_: str, message: str, loc: Loc, level: Level = "violation") -> None:
        line, col = self.located.position(loc)
        self.findings.append(
            Finding(id_, message, level=level, file=self.located.path, line=line, col=col)
        )


def _compile(registry: Registry, located: Located) -> Spec:
    report = _Report(located)
    groups = {
        n: GroupDef(n, g.description, g.bucket.value if g.bucket else None)
        for n, g in registry.groups.items()
    }
    attributes = _attributes(registry, report)
    _check_presets(registry, groups, report)
    spans, algorithms = _spans(registry, groups, attributes, report)
    metrics = {
        name: _metric(name, m, spans, attributes, report) for name, m in registry.metrics.items()
    }
    conventions = _conventions(registry.conventions, spans, attributes, report)
    if any(f.level == "violation" for f in report.findings):
        raise SpecError(report.findings)
    return Spec(
        version=registry.version,
        source=located.path,
        groups=MappingProxyType(groups),
        presets=MappingProxyType({n: tuple(ms) for n, ms in registry.presets.items()}),
        attributes=MappingProxyType(attributes),
        spans=MappingProxyType(spans),
        metrics=MappingProxyType(metrics),
        algorithms=tuple(algorithms),
        conventions=conventions,
        findings=tuple(report.findings),
    )


def _attributes(registry: Registry, report: _Report) -> dict[str, AttributeDef]:
    """Declared attributes; an ``allowed`` value of the wrong type is a violation."""
    attributes = {}
    for key, a in registry.attributes.items():
        if a.allowed is not None:
            probe = AttributeDef(key, a.type.value, a.brief)
            for i, value in enumerate(a.allowed):
                if not probe.accepts([value] if a.type.value.endswith("[]") else value):
                    hint = (
                        " (YAML reads an unquoted yes, no, on, off, true or false as a boolean: "
                        "quote it, such as 'yes')"
                        if isinstance(value, bool) and a.type.value.startswith("string")
                        else ""
                    )
                    report(
                        "attribute.allowed_type",
                        f"attributes.{key}.allowed[{i}]: {as_yaml(value)} is not "
                        f"{a_type(a.type.value)}{hint}",
                        ("attributes", key, "allowed", i),
                    )
        attributes[key] = AttributeDef(
            key,
            a.type.value,
            a.brief,
            frozenset(a.allowed) if a.allowed is not None else None,
            a.sensitive,
            a.cardinality,
        )
    return attributes


def _check_presets(registry: Registry, groups: Mapping[str, GroupDef], report: _Report) -> None:
    """Preset names must not clash with groups, members must exist, no cycles."""
    for name, members in registry.presets.items():
        if name in groups:
            report(
                "preset.shadows_group",
                f"presets.{name}: a preset cannot have the name of a group",
                ("presets", name),
            )
        for i, member in enumerate(members):
            if member not in groups and member not in registry.presets:
                valid = [*groups, *registry.presets]
                report(
                    "preset.unknown_member",
                    f"presets.{name}: '{member}' is neither a group nor a preset{did_you_mean(member, valid)}",
                    ("presets", name, i),
                )
    for name in registry.presets:
        cycle = _find_cycle(name, registry.presets)
        if cycle:
            report(
                "preset.cycle",
                f"presets.{name}: presets name each other in a cycle: {' -> '.join(cycle)}",
                ("presets", name),
            )


def _spans(
    registry: Registry,
    groups: Mapping[str, GroupDef],
    attributes: Mapping[str, AttributeDef],
    report: _Report,
) -> tuple[dict[str, SpanEntry], list[str]]:
    """Concrete span entries (templates expanded) and the algorithms, in declaration order."""
    spans: dict[str, SpanEntry] = {}
    first_seen: dict[str, int] = {}
    algorithms: list[str] = []
    group_constants = {
        name: _checked_constants(
            f"groups.{name}", group.constants, ("groups", name, "constants"), attributes, report
        )
        for name, group in registry.groups.items()
    }
    for i, decl in enumerate(registry.spans):
        _check_span_naming(i, decl, groups, report)
        span_attrs = _span_attributes(i, decl, attributes, report)
        reqs = {k: r.value for k, r in decl.attributes.items() if k in span_attrs}
        constants = {
            **group_constants.get(decl.group, {}),
            **_checked_constants(
                f"spans[{i}] '{decl.name}'",
                decl.constants,
                ("spans", i, "constants"),
                attributes,
                report,
            ),
        }
        for key in constants:  # set by the runtime; traces written before it was declared lack it
            span_attrs[key] = attributes[key]
            reqs[key] = "recommended"
        requirements = MappingProxyType(reqs)
        frozen_constants = MappingProxyType(constants)
        frozen_attrs = MappingProxyType(span_attrs)
        bound = parse_duration(decl.max_duration) if decl.max_duration else None
        for name, algorithm in _expansions(decl):
            if algorithm and algorithm not in algorithms:
                algorithms.append(algorithm)
            if name in spans:
                report(
                    "span.duplicate",
                    f"spans[{i}]: span '{name}' is already declared by spans[{first_seen[name]}]",
                    ("spans", i, "name"),
                )
                continue
            first_seen[name] = i
            spans[name] = SpanEntry(
                name,
                decl.group,
                decl.brief,
                decl.name,
                algorithm,
                frozen_attrs,
                requirements,
                bound,
                frozen_constants,
            )
    return spans, algorithms


def _checked_constants(
    where: str,
    given: Mapping[str, object],
    loc: Loc,
    attributes: Mapping[str, AttributeDef],
    report: _Report,
) -> dict[str, object]:
    """``given`` constants that are declared attributes with an accepted value; each other one
    is a violation, placed at its key."""
    constants: dict[str, object] = {}
    for key, value in given.items():
        if key not in attributes:
            report(
                "constant.unknown_attribute",
                f"{where}: constant '{key}' is not declared under 'attributes'"
                f"{did_you_mean(key, attributes)}",
                (*loc, key),
            )
        elif not attributes[key].accepts(value):
            report(
                "constant.bad_value",
                f"{where}: constant '{key}' = {value!r} is not {describe(attributes[key])}",
                (*loc, key),
            )
        else:
            constants[key] = value
    return constants


def _check_span_naming(
    i: int, decl: SpanDecl, groups: Mapping[str, GroupDef], report: _Report
) -> None:
    """The group must be declared; ``{algorithm}`` and ``algorithms`` come together."""
    where = ("spans", i)
    if decl.group not in groups:
        report(
            "span.unknown_group",
            f"spans[{i}] '{decl.name}': group '{decl.group}' is not declared{did_you_mean(decl.group, groups)}",
            (*where, "group"),
        )
    templated = ALGORITHM_PLACEHOLDER in decl.name
    if decl.name.count(ALGORITHM_PLACEHOLDER) > 1:
        report(
            "span.placeholder_repeated",
            f"spans[{i}] '{decl.name}': {ALGORITHM_PLACEHOLDER} appears "
            f"{decl.name.count(ALGORITHM_PLACEHOLDER)} times; a name holds it once "
            f"(such as 'app.{{algorithm}}.step')",
            (*where, "name"),
        )
    if templated and not decl.algorithms:
        report(
            "span.missing_algorithms",
            f"spans[{i}] '{decl.name}': a name with {ALGORITHM_PLACEHOLDER} needs an 'algorithms' list",
            (*where, "name"),
        )
    if decl.algorithms and not templated:
        report(
            "span.algorithms_without_placeholder",
            f"spans[{i}] '{decl.name}': 'algorithms' is set but the name has no {ALGORITHM_PLACEHOLDER}",
            (*where, "algorithms"),
        )


def _span_attributes(
    i: int, decl: SpanDecl, attributes: Mapping[str, AttributeDef], report: _Report
) -> dict[str, AttributeDef]:
    """The span's attributes; one not declared under ``attributes`` is a violation."""
    span_attrs = {}
    for key in decl.attributes:
        if key not in attributes:
            report(
                "span.unknown_attribute",
                f"spans[{i}] '{decl.name}': attribute '{key}' is not declared under 'attributes'{did_you_mean(key, attributes)}",
                ("spans", i, "attributes", key),
            )
            continue
        span_attrs[key] = attributes[key]
    return span_attrs


def _expansions(decl: SpanDecl) -> list[tuple[str, str | None]]:
    """``(concrete name, algorithm)`` for each algorithm of a template, else the name itself."""
    if ALGORITHM_PLACEHOLDER in decl.name and decl.algorithms:
        return [(decl.name.replace(ALGORITHM_PLACEHOLDER, a), a) for a in decl.algorithms]
    return [(decl.name, None)]


def _metric(
    name: str,
    m: MetricDecl,
    spans: Mapping[str, SpanEntry],
    attributes: Mapping[str, AttributeDef],
    report: _Report,
) -> MetricDef:
    """One metric: one source, known spans (then a histogram), low-cardinality attributes."""
    where = ("metrics", name)
    if m.from_ and m.span:
        report(
            "metric.two_sources",
            f"metrics.{name}: set either 'from' (logger keys) or 'span', not both",
            where,
        )
    fed: set[str] = set()
    for j, template in enumerate(m.spans):
        names = {n for n, e in spans.items() if template in (e.template, n)}
        if not names:
            loc = (*where, "span") if isinstance(m.span, str) else (*where, "span", j)
            report(
                "metric.unknown_span",
                f"metrics.{name}: span '{template}' is not declared{did_you_mean(template, [*spans, *{e.template for e in spans.values()}])}",
                loc,
            )
        fed |= names
    if m.spans and m.instrument.value != "histogram":
        report(
            "metric.span_needs_histogram",
            f"metrics.{name}: a metric fed by span durations must be a histogram, not a {m.instrument.value}",
            (*where, "instrument"),
        )
    _check_metric_attributes(name, m, attributes, report)
    if m.buckets is not None:
        if m.instrument.value != "histogram":
            report(
                "metric.buckets_need_histogram",
                f"metrics.{name}: only a histogram has buckets, not a {m.instrument.value}",
                (*where, "buckets"),
            )
        elif not all(math.isfinite(b) for b in m.buckets) or any(
            b >= c for b, c in zip(m.buckets, m.buckets[1:], strict=False)
        ):
            report(
                "metric.buckets_not_increasing",
                f"metrics.{name}: bucket boundaries must be finite and strictly increasing "
                f"(got {m.buckets})",
                (*where, "buckets"),
            )
    if name.rsplit(".", 1)[-1] in {"seconds", "ms", "bytes", "total"}:
        report(
            "metric.unit_in_name",
            f"metrics.{name}: OpenTelemetry names carry no unit; put it in 'unit'",
            where,
            level="improvement",
        )
    return MetricDef(
        name,
        m.instrument.value,
        m.unit,
        m.brief,
        tuple(m.from_ or ()),
        frozenset(fed),
        m.spans,
        tuple(m.attributes),
        tuple(m.buckets) if m.buckets is not None else None,
    )


def _check_metric_attributes(
    name: str, m: MetricDecl, attributes: Mapping[str, AttributeDef], report: _Report
) -> None:
    for j, key in enumerate(m.attributes):
        if key not in attributes:
            report(
                "metric.unknown_attribute",
                f"metrics.{name}: attribute '{key}' is not declared{did_you_mean(key, attributes)}",
                ("metrics", name, "attributes", j),
            )
        elif attributes[key].cardinality == "high":
            report(
                "metric.high_cardinality_attribute",
                f"metrics.{name}: attribute '{key}' is high-cardinality and cannot label a metric",
                ("metrics", name, "attributes", j),
            )


def _conventions(
    decl: ConventionsDecl,
    spans: Mapping[str, SpanEntry],
    attributes: Mapping[str, AttributeDef],
    report: _Report,
) -> Conventions:
    """The ``conventions:`` block: each key names something declared, and the prefixes are
    told apart (a prefix inside another would read one program's variables as the other's)."""
    where = ("conventions",)
    prefixes = [decl.env_prefix] if decl.env_prefix else []
    if decl.env_fallback_prefixes and not decl.env_prefix:
        report(
            "conventions.fallback_without_prefix",
            "conventions.env_fallback_prefixes: needs an env_prefix to fall back from",
            (*where, "env_fallback_prefixes"),
        )
    for i, prefix in enumerate(decl.env_fallback_prefixes):
        loc = (*where, "env_fallback_prefixes", i)
        clash = next((p for p in prefixes if prefix.startswith(p) or p.startswith(prefix)), None)
        if clash is not None:
            report(
                "conventions.prefix_overlap",
                f"conventions.env_fallback_prefixes: '{prefix}' "
                + ("is already a prefix" if clash == prefix else f"overlaps '{clash}'")
                + "; each prefix must name its own variables (neither may start with the other)",
                loc,
            )
        prefixes.append(prefix)
    for i, prefix in enumerate(prefixes):
        if prefix.startswith("OTEL_"):
            loc = (*where, "env_prefix") if i == 0 else (*where, "env_fallback_prefixes", i - 1)
            report(
                "conventions.otel_prefix",
                f"conventions: '{prefix}' is the OpenTelemetry SDK's own prefix; choose one for "
                "the program, e.g. 'MYAPP_OTEL_'",
                loc,
            )

    templates = {e.template for e in spans.values()}
    step_names: frozenset[str] = frozenset()
    if decl.step_span is not None:
        step_names = frozenset(n for n, e in spans.items() if decl.step_span in (e.template, n))
        if not step_names:
            report(
                "conventions.unknown_span",
                f"conventions.step_span: span '{decl.step_span}' is not declared"
                f"{did_you_mean(decl.step_span, [*spans, *templates])}",
                (*where, "step_span"),
            )
    if decl.step_attribute is not None:
        loc = (*where, "step_attribute")
        if decl.step_span is None:
            report(
                "conventions.attribute_without_step",
                "conventions.step_attribute: needs a step_span whose steps it numbers",
                loc,
            )
        if _declared(decl.step_attribute, "step_attribute", attributes, report, loc):
            kind = attributes[decl.step_attribute].type
            if kind != "int":
                report(
                    "conventions.step_attribute_type",
                    f"conventions.step_attribute: '{decl.step_attribute}' is {a_type(kind)}; "
                    "steps are numbered by an int attribute",
                    loc,
                )
            missing = sorted(
                n for n in step_names if decl.step_attribute not in spans[n].attributes
            )
            if missing:
                report(
                    "conventions.step_attribute_not_on_step",
                    f"conventions.step_attribute: '{decl.step_attribute}' is not an attribute of "
                    f"the step span '{missing[0]}'; add it to the span's attributes",
                    loc,
                )
    if decl.run_attribute is not None:
        _declared(
            decl.run_attribute, "run_attribute", attributes, report, (*where, "run_attribute")
        )
    # What the runtime measures and sets on every span that declares it: a plain number.
    measured = {
        "cpu_attribute": (decl.cpu_attribute, "CPU seconds", "float"),
        "rss_peak_attribute": (decl.rss_peak_attribute, "a memory peak in bytes", "int"),
        "rss_rise_attribute": (decl.rss_rise_attribute, "a memory rise in bytes", "int"),
    }
    seen_measured: dict[str, str] = {}
    for field, (key, what, suggested) in measured.items():
        loc = (*where, field)
        if key is None or not _declared(key, field, attributes, report, loc):
            continue
        a = attributes[key]
        if key in seen_measured:
            report(
                "conventions.duplicate",
                f"conventions.{field}: '{key}' is also conventions.{seen_measured[key]}; each "
                "measured value needs its own attribute",
                loc,
            )
        seen_measured[key] = field
        if a.type not in ("int", "float"):
            report(
                f"conventions.{field}_type",
                f"conventions.{field}: '{key}' is declared {a.type}; it holds {what}, a "
                f"number: declare it 'type: {suggested}'",
                loc,
            )
        elif a.sensitive or a.allowed is not None:
            report(
                "conventions.measured_attribute",
                f"conventions.{field}: '{key}' is declared "
                f"{'sensitive' if a.sensitive else 'with allowed values'}; the runtime sets "
                f"{what} on every span that declares it: remove "
                f"'{'sensitive' if a.sensitive else 'allowed'}' from its declaration",
                loc,
            )
    for key in ("lane_attributes", "report_attributes", "peak_attributes"):
        seen: set[str] = set()
        for i, name in enumerate(getattr(decl, key)):
            loc = (*where, key, i)
            if name in seen:
                report("conventions.duplicate", f"conventions.{key}: '{name}' is listed twice", loc)
            seen.add(name)
            _declared(name, key, attributes, report, loc)
    if decl.main_lane is not None and not decl.lane_attributes:
        report(
            "conventions.main_lane_without_lanes",
            "conventions.main_lane: needs lane_attributes, whose first one it is a value of",
            (*where, "main_lane"),
        )
    elif decl.main_lane is not None and decl.lane_attributes[0] in attributes:
        first = attributes[decl.lane_attributes[0]]
        if first.allowed is not None and decl.main_lane not in first.allowed:
            values = sorted(map(str, first.allowed))
            report(
                "conventions.main_lane_value",
                f"conventions.main_lane: '{decl.main_lane}' is not an allowed value of "
                f"'{first.key}'{did_you_mean(decl.main_lane, values)}; allowed: {', '.join(values)}",
                (*where, "main_lane"),
            )
    return Conventions(
        env_prefix=decl.env_prefix,
        env_fallback_prefixes=tuple(decl.env_fallback_prefixes),
        service_name=decl.service_name,
        step_span=decl.step_span,
        step_attribute=decl.step_attribute,
        run_attribute=decl.run_attribute,
        lane_attributes=tuple(decl.lane_attributes),
        main_lane=decl.main_lane,
        report_attributes=tuple(decl.report_attributes),
        peak_attributes=tuple(
            dict.fromkeys(
                k
                for k in (decl.rss_peak_attribute, decl.rss_rise_attribute, *decl.peak_attributes)
                if k is not None
            )
        ),
        cpu_attribute=decl.cpu_attribute,
        rss_peak_attribute=decl.rss_peak_attribute,
        rss_rise_attribute=decl.rss_rise_attribute,
    )


def _declared(
    key: str, field: str, attributes: Mapping[str, AttributeDef], report: _Report, loc: Loc
) -> bool:
    """Whether ``key`` is a declared attribute; reports it with the closest one when not."""
    if key in attributes:
        return True
    report(
        "conventions.unknown_attribute",
        f"conventions.{field}: attribute '{key}' is not declared under 'attributes'"
        f"{did_you_mean(key, attributes)}",
        loc,
    )
    return False


def _find_cycle(start: str, presets: Mapping[str, list[str]]) -> list[str] | None:
    """Return a cycle ``[start, ..., start]`` through presets, or None."""
    stack = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for member in presets.get(node, ()):
            if member == start:
                return [*path, start]
            if member in presets and member not in path:
                stack.append((member, [*path, member]))
    return None
