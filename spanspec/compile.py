"""Schema -> :class:`Spec`: a frozen table of span name -> entry, and group expressions.

Compiling expands ``rl.{algorithm}.<phase>`` templates, checks the cross-references the schema
cannot see on its own (undeclared groups and attributes, preset cycles, duplicate names, metrics
fed by unknown spans), and collects every problem as a finding before raising.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from spanspec.findings import Finding, SpecError, a_type, did_you_mean

if TYPE_CHECKING:  # pydantic and PyYAML load only when a registry file is read
    from spanspec.loader import Located
    from spanspec.schema import Registry

ALGORITHM_PLACEHOLDER = "{algorithm}"

__all__ = ["AttributeDef", "GroupDef", "MetricDef", "SpanEntry", "Spec", "compile_registry", "load"]

# Python types accepted for each declared attribute type (bool is not an int here).
_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
}


@dataclass(frozen=True, slots=True)
class GroupDef:
    name: str
    description: str
    bucket: str | None


@dataclass(frozen=True, slots=True)
class AttributeDef:
    key: str
    type: str
    brief: str
    allowed: frozenset[object] | None = None
    sensitive: bool = False
    cardinality: str = "low"

    def accepts(self, value: object) -> bool:
        """Whether ``value`` has the declared type and, where bounded, an allowed value."""
        if self.type.endswith("[]"):
            kinds = _SCALARS[self.type[:-2]]
            if not isinstance(value, list | tuple):
                return False
            items = value
        else:
            kinds = _SCALARS[self.type]
            items = (value,)
        for item in items:
            if isinstance(item, bool) and bool not in kinds:
                return False
            if not isinstance(item, kinds):
                return False
            if self.allowed is not None and item not in self.allowed:
                return False
        return True


@dataclass(frozen=True, slots=True)
class SpanEntry:
    """One concrete span name, after template expansion."""

    name: str
    group: str
    brief: str
    template: str
    algorithm: str | None
    attributes: Mapping[str, AttributeDef]
    requirements: Mapping[str, str]

    @property
    def required(self) -> frozenset[str]:
        return frozenset(k for k, r in self.requirements.items() if r == "required")


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    instrument: str
    unit: str
    brief: str
    from_keys: tuple[str, ...] = ()
    spans: frozenset[str] = frozenset()
    span_templates: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spec:
    """The compiled registry. Immutable; safe to share between threads."""

    version: int
    source: str
    groups: Mapping[str, GroupDef]
    presets: Mapping[str, tuple[str, ...]]
    attributes: Mapping[str, AttributeDef]
    spans: Mapping[str, SpanEntry]
    metrics: Mapping[str, MetricDef]
    algorithms: tuple[str, ...] = field(default=())
    findings: tuple[Finding, ...] = field(default=(), compare=False, repr=False)  # improvements

    # -- group expressions ----------------------------------------------------------------------

    def resolve(self, expression: str | Iterable[str] | None) -> frozenset[str]:
        """Return the enabled group names for a group expression such as ``"per_step,-generation"``.

        Words are presets or groups, case-insensitive, comma separated; ``-word`` removes.
        Raises:
            SpecError: naming each unknown word, the valid words, and the closest match.
        """
        return frozenset(self.explain(expression))

    def explain(self, expression: str | Iterable[str] | None) -> dict[str, str]:
        """Return enabled group -> what turned it on (``"group"`` or ``"preset default"``...)."""
        enabled: dict[str, str] = {}
        findings = []
        for word in _words(expression):
            remove = word.startswith("-")
            name = word.lstrip("+-").strip()
            if name in self.groups:
                members = {name: "group"}
            elif name in self.presets:
                members = {g: f"preset {via}" for g, via in self._expand_preset(name).items()}
            elif name == "all":  # implicit when a registry does not declare it
                members = dict.fromkeys(self.groups, "preset all")
            else:
                valid = [*{*self.presets, "all"}, *self.groups]
                findings.append(
                    Finding(
                        "groups.unknown",
                        f"unknown group or preset '{name}'{did_you_mean(name, valid)}; "
                        f"valid presets: {', '.join(sorted({*self.presets, 'all'}))}; "
                        f"groups: {', '.join(sorted(self.groups))}",
                        file="<group expression>",
                    )
                )
                continue
            for group, why in members.items():
                if remove:
                    enabled.pop(group, None)
                else:
                    enabled.setdefault(group, why)
        if findings:
            raise SpecError(findings)
        return enabled

    def _expand_preset(self, preset: str) -> dict[str, str]:
        """Groups of a preset -> the (innermost) preset that names them. Cycles are rejected at compile."""
        out: dict[str, str] = {}
        for member in self.presets[preset]:
            if member in self.groups:
                out.setdefault(member, preset)
            else:
                for group, via in self._expand_preset(member).items():
                    out.setdefault(group, via)
        return out

    def enabled_spans(self, expression: str | Iterable[str] | None) -> frozenset[str]:
        """Return the span names whose group the expression enables."""
        groups = self.resolve(expression)
        return frozenset(name for name, entry in self.spans.items() if entry.group in groups)

    def spans_of_template(self, template: str) -> frozenset[str]:
        """Concrete names a template (or a plain name) stands for."""
        return frozenset(n for n, e in self.spans.items() if template in (e.template, n))


def _words(expression: str | Iterable[str] | None) -> list[str]:
    if expression is None:
        return []
    parts = expression.split(",") if isinstance(expression, str) else list(expression)
    return [p.strip().lower() for p in parts if p and p.strip()]


def load(path: str | os.PathLike[str] | None = None) -> Spec:
    """Load and compile a registry file (default: :func:`default_registry_path`).

    Raises:
        SpecError: listing every problem in the file, each with file, line and column.
    """
    from spanspec.loader import load_registry

    path = default_registry_path() if path is None else path
    with _gc_paused():
        registry, located = load_registry(path)
        return compile_registry(registry, located)


def default_registry_path() -> Path:
    """``$SPANSPEC_REGISTRY``, else the registry shipped in the package.

    ``spanspec/registry/span_groups.yaml`` is in the wheel; in a checkout it links to
    ``schemas/span_groups.yaml``, the file that is edited, and that is the path reported.
    """
    env = os.environ.get("SPANSPEC_REGISTRY")
    if env:
        return Path(env)
    return (Path(__file__).parent / "registry" / "span_groups.yaml").resolve()


@contextmanager
def _gc_paused() -> Iterator[None]:
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


def compile_registry(registry: Registry, located: Located | None = None) -> Spec:
    """Check cross-references and build the frozen :class:`Spec`.

    Raises:
        SpecError: with every violation found (improvements alone do not raise).
    """
    with _gc_paused():
        return _compile(registry, located)


def _compile(registry: Registry, located: Located | None) -> Spec:
    if located is None:
        from spanspec.loader import Located

        located = Located("<registry>", None, None)
    findings: list[Finding] = []

    def report(
        id_: str, message: str, loc: tuple[str | int, ...], level: str = "violation"
    ) -> None:
        line, col = located.position(loc)
        findings.append(Finding(id_, message, level=level, file=located.path, line=line, col=col))  # type: ignore[arg-type]

    groups = {
        n: GroupDef(n, g.description, g.bucket.value if g.bucket else None)
        for n, g in registry.groups.items()
    }
    attributes = {}
    for key, a in registry.attributes.items():
        if a.allowed is not None:
            probe = AttributeDef(key, a.type.value, a.brief)
            for i, value in enumerate(a.allowed):
                if not probe.accepts([value] if a.type.value.endswith("[]") else value):
                    report(
                        "attribute.allowed_type",
                        f"attributes.{key}.allowed: {value!r} is not {a_type(a.type.value)}",
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

    # Presets: names must not clash with groups, members must exist, no cycles.
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

    spans: dict[str, SpanEntry] = {}
    first_seen: dict[str, int] = {}
    algorithms: list[str] = []
    for i, decl in enumerate(registry.spans):
        where = ("spans", i)
        if decl.group not in groups:
            report(
                "span.unknown_group",
                f"spans[{i}] '{decl.name}': group '{decl.group}' is not declared{did_you_mean(decl.group, groups)}",
                (*where, "group"),
            )
        templated = ALGORITHM_PLACEHOLDER in decl.name
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
        span_attrs = {}
        for key in decl.attributes:
            if key not in attributes:
                report(
                    "span.unknown_attribute",
                    f"spans[{i}] '{decl.name}': attribute '{key}' is not declared under 'attributes'{did_you_mean(key, attributes)}",
                    (*where, "attributes", key),
                )
                continue
            span_attrs[key] = attributes[key]
        requirements = MappingProxyType(
            {k: r.value for k, r in decl.attributes.items() if k in span_attrs}
        )
        frozen_attrs = MappingProxyType(span_attrs)
        expansions = (
            [(decl.name.replace(ALGORITHM_PLACEHOLDER, a), a) for a in decl.algorithms]
            if templated and decl.algorithms
            else [(decl.name, None)]
        )
        for name, algorithm in expansions:
            if algorithm and algorithm not in algorithms:
                algorithms.append(algorithm)
            if name in spans:
                report(
                    "span.duplicate",
                    f"spans[{i}]: span '{name}' is already declared by spans[{first_seen[name]}]",
                    (*where, "name"),
                )
                continue
            first_seen[name] = i
            spans[name] = SpanEntry(
                name, decl.group, decl.brief, decl.name, algorithm, frozen_attrs, requirements
            )

    metrics = {}
    for name, m in registry.metrics.items():
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
        for j, key in enumerate(m.attributes):
            if key not in attributes:
                report(
                    "metric.unknown_attribute",
                    f"metrics.{name}: attribute '{key}' is not declared{did_you_mean(key, attributes)}",
                    (*where, "attributes", j),
                )
            elif attributes[key].cardinality == "high":
                report(
                    "metric.high_cardinality_attribute",
                    f"metrics.{name}: attribute '{key}' is high-cardinality and cannot label a metric",
                    (*where, "attributes", j),
                )
        if name.rsplit(".", 1)[-1] in {"seconds", "ms", "bytes", "total"}:
            report(
                "metric.unit_in_name",
                f"metrics.{name}: OpenTelemetry names carry no unit; put it in 'unit'",
                where,
                level="improvement",
            )
        metrics[name] = MetricDef(
            name,
            m.instrument.value,
            m.unit,
            m.brief,
            tuple(m.from_ or ()),
            frozenset(fed),
            m.spans,
            tuple(m.attributes),
        )

    violations = [f for f in findings if f.level == "violation"]
    if violations:
        raise SpecError(findings)
    return Spec(
        version=registry.version,
        source=located.path,
        groups=MappingProxyType(groups),
        presets=MappingProxyType({n: tuple(ms) for n, ms in registry.presets.items()}),
        attributes=MappingProxyType(attributes),
        spans=MappingProxyType(spans),
        metrics=MappingProxyType(metrics),
        algorithms=tuple(algorithms),
        findings=tuple(findings),
    )


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
