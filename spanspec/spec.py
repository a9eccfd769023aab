"""The compiled registry: a frozen table of span name -> entry, and group-expression resolution.

:class:`Spec` is what every consumer reads (:mod:`spanspec.runtime`, :mod:`spanspec.metrics`,
:mod:`spanspec.traces.livecheck`, :mod:`spanspec.checks.docs`, :mod:`spanspec.checks.codescan`, :mod:`spanspec.testing`).
It is built by :mod:`spanspec.registry.compile`; this module imports neither pydantic nor YAML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spanspec.findings import Finding, SpecError, did_you_mean

__all__ = [
    "ALGORITHM_PLACEHOLDER",
    "GROUPS_OVERRIDE_NAME",
    "GROUPS_RESOURCE_ATTRIBUTE",
    "REDACTED",
    "REGISTRY_RESOURCE_ATTRIBUTE",
    "AttributeDef",
    "Conventions",
    "GroupDef",
    "MetricDef",
    "SpanEntry",
    "Spec",
    "format_duration",
    "parse_duration",
]

ALGORITHM_PLACEHOLDER = "{algorithm}"
# What a sensitive attribute's value is replaced with, on the way out and when checked back.
REDACTED = "[REDACTED]"


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smh])\s*$")


def parse_duration(text: str) -> float:
    """Return ``"90s"``, ``"10m"`` or ``"1.5h"`` in seconds.

    Raises:
        ValueError: naming what is expected, for any other text or a zero duration.
    """
    match = _DURATION.match(text) if isinstance(text, str) else None
    seconds = float(match.group(1)) * DURATION_UNITS[match.group(2)] if match else 0.0
    if seconds <= 0:
        raise ValueError("expected a positive duration with a unit s, m or h (e.g. 30s, 10m, 2h)")
    return seconds


def format_duration(seconds: float) -> str:
    """Return seconds as the registry writes them: ``600.0`` -> ``"10m"``, ``1.5`` -> ``"1.5s"``."""
    for unit in ("h", "m"):
        size = DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


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
    max_duration_s: float | None = None
    """The registry's ``max_duration``: how long the span may stay open before the watchdog warns."""
    constants: Mapping[str, object] = field(default_factory=dict)
    """The registry's ``constants`` (its group's, then its own): set on the span at its start."""

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
    buckets: tuple[float, ...] | None = None
    """A histogram's bucket boundaries as the registry declares them (None: the default)."""


# Resource attributes a process may set for the readers of its traces: the registry file its
# spans follow (`spanspec view`, `report`, `live-check` then need no --registry), and the groups
# it had switched on (live-check then tells a span emitted while its group was off).
REGISTRY_RESOURCE_ATTRIBUTE = "spanspec.registry"
GROUPS_RESOURCE_ATTRIBUTE = "spanspec.groups"
# A span the shutdown ended because it was still open (a stopped run): its time is partial.
TRUNCATED_ATTRIBUTE = "spanspec.truncated"
# The setting whose variable, ``$<env_prefix>SPAN_GROUPS``, overrides the groups at activation.
GROUPS_OVERRIDE_NAME = "SPAN_GROUPS"


@dataclass(frozen=True, slots=True)
class Conventions:
    """What the program that owns a registry calls things: the registry's ``conventions:`` block.

    spanspec itself knows no application; everything here comes from the registry, and a registry
    without the block gets these neutral defaults (no env prefix: only the SDK's ``OTEL_*``
    variables apply; no step span: readers draw whole traces; lanes by service and process).
    """

    env_prefix: str | None = None
    """Settings are read from ``$<env_prefix><NAME>`` (``MYAPP_OTEL_ENABLED``)."""
    env_fallback_prefixes: tuple[str, ...] = ()
    """Read, in order, when the ``env_prefix`` variable is unset (a predecessor's names)."""
    service_name: str | None = None
    """The default OpenTelemetry ``service.name`` of the program's processes."""
    step_span: str | None = None
    """What one step is: a declared span name, or a ``{algorithm}`` template."""
    step_attribute: str | None = None
    """The attribute of the step span that numbers steps (an int)."""
    run_attribute: str | None = None
    """The resource attribute every process of one run shares (a run id)."""
    lane_attributes: tuple[str, ...] = ()
    """Resource attributes that name a process's lane, most significant first."""
    main_lane: str | None = None
    """The value of the first lane attribute that marks the main process: drawn first, named
    by that value alone."""
    report_attributes: tuple[str, ...] = ()
    """Resource attributes a report's header shows."""
    peak_attributes: tuple[str, ...] = ()
    """Numeric span attributes holding a peak (memory high-water marks), the RSS ones first:
    readers show their maximum per phase and lane."""
    cpu_attribute: str | None = None
    """A numeric span attribute holding the CPU seconds the span's process spent inside it
    (measured by the runtime where declared): readers show CPU over wall time per phase and lane
    (below 1: waiting, or no core to run on)."""
    rss_peak_attribute: str | None = None
    """A numeric span attribute holding the process's resident-memory high-water mark within the
    span, in bytes (measured by the runtime where declared; also in ``peak_attributes``)."""
    rss_rise_attribute: str | None = None
    """A numeric span attribute holding how far that mark rose above the span's starting
    resident memory, in bytes (measured like it; also in ``peak_attributes``)."""

    @property
    def env_prefixes(self) -> tuple[str, ...]:
        """Every prefix settings are read under, the first one winning: ``env_prefix`` then the
        fallbacks; empty when the registry declares none."""
        return (self.env_prefix, *self.env_fallback_prefixes) if self.env_prefix else ()

    @property
    def groups_variable(self) -> str | None:
        """``$<env_prefix>SPAN_GROUPS``, which overrides the groups at activation; None without a
        prefix."""
        return f"{self.env_prefix}{GROUPS_OVERRIDE_NAME}" if self.env_prefix else None

    def is_step_span(self, name: str) -> bool:
        """Whether ``name`` is a step span: the ``step_span`` name, or any expansion of its
        ``{algorithm}`` template (also one the registry does not list)."""
        step = self.step_span
        if step is None:
            return False
        if ALGORITHM_PLACEHOLDER not in step:
            return name == step
        head, _, tail = step.partition(ALGORITHM_PLACEHOLDER)
        middle = name[len(head) : len(name) - len(tail)] if len(name) > len(head + tail) else ""
        return (
            name.startswith(head)
            and name.endswith(tail)
            and bool(middle)
            and _WORD.fullmatch(middle) is not None
        )


_WORD = re.compile(r"[a-z0-9_]+")


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
    conventions: Conventions = field(default=Conventions())
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
        if isinstance(expression, str) and "," in expression:
            parts = [p.strip() for p in expression.split(",")]
            if not all(parts[:-1]) or not any(parts):  # one trailing comma is harmless
                findings.append(
                    Finding(
                        "groups.empty_word",
                        f"group expression {expression!r} has an empty word between commas, "
                        "which would switch spans off unseen; write words such as "
                        "'per_step,-generation'",
                        file="<group expression>",
                    )
                )
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
