"""Pydantic models of the registry file (``schemas/span_groups.yaml``).

These models check the *shape* of each entry. Checks that need the whole file (a span naming an
undeclared group, a preset cycle, duplicate names after expansion) live in :mod:`spanspec.registry.compile`.
``spanspec.registry.schema.json_schema()`` exports the JSON Schema for editors.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from spanspec.spec import ALGORITHM_PLACEHOLDER, parse_duration

__all__ = [
    "ALGORITHM_PLACEHOLDER",
    "AttributeDecl",
    "AttributeType",
    "Bucket",
    "ConventionsDecl",
    "GroupDecl",
    "Instrument",
    "MetricDecl",
    "Registry",
    "Requirement",
    "SpanDecl",
    "json_schema",
]


# Lower-case dotted names, as OpenTelemetry recommends for span, attribute and metric names.
_DOTTED = r"^[a-z][a-z0-9_]*(\.([a-z0-9_]+|\{algorithm\}))*$"
# Attribute keys, also of resource attributes: dotted, no placeholder.
_KEY = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$"
# An environment-variable prefix: upper case, ending in an underscore (MYAPP_OTEL_).
ENV_PREFIX = r"^[A-Z][A-Z0-9_]*_$"
Word = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
DottedName = Annotated[str, StringConstraints(pattern=_DOTTED)]
AttributeKey = Annotated[str, StringConstraints(pattern=_KEY)]
EnvPrefix = Annotated[str, StringConstraints(pattern=ENV_PREFIX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Bucket(StrEnum):
    """What kind of time a group measures, for the efficiency breakdown."""

    productive = "productive"
    overhead = "overhead"
    idle = "idle"
    wasted = "wasted"


class AttributeType(StrEnum):
    string = "string"
    int = "int"
    float = "float"
    bool = "bool"
    string_list = "string[]"
    int_list = "int[]"
    float_list = "float[]"
    bool_list = "bool[]"


class Requirement(StrEnum):
    required = "required"
    recommended = "recommended"
    opt_in = "opt_in"


class Instrument(StrEnum):
    gauge = "gauge"
    counter = "counter"
    histogram = "histogram"
    up_down_counter = "up_down_counter"


_CONSTANTS_DOC = (
    "Attributes with a fixed value, set on every span {where} at its start (a backend's "
    "classification, such as openinference.span.kind); each key declared under attributes."
)
Constants = dict[AttributeKey, str | int | float | bool]


class GroupDecl(_Strict):
    description: str = Field(min_length=1, description="One line: what the group's spans measure.")
    bucket: Bucket | None = Field(
        default=None, description="Efficiency bucket; none for umbrella groups (job, step)."
    )
    constants: Constants = Field(
        default_factory=dict, description=_CONSTANTS_DOC.format(where="of the group")
    )


class AttributeDecl(_Strict):
    type: AttributeType
    brief: str = Field(min_length=1)
    allowed: list[str | int | float | bool] | None = Field(
        default=None, description="The closed set of values, where bounded."
    )
    sensitive: bool = Field(default=False, description="Redacted on export.")
    cardinality: str = Field(
        default="low",
        pattern="^(low|high)$",
        description="high: never used as a metric label.",
    )


class SpanDecl(_Strict):
    name: DottedName
    group: Word
    brief: str = Field(min_length=1)
    algorithms: list[Word] | None = Field(
        default=None,
        description="Expand the name's `{algorithm}` once per algorithm listed; needs the placeholder.",
    )
    attributes: dict[str, Requirement] = Field(default_factory=dict)
    constants: Constants = Field(
        default_factory=dict,
        description=_CONSTANTS_DOC.format(where="of this name") + " Over its group's.",
    )
    max_duration: str | None = Field(
        default=None,
        description="How long the span may stay open (30s, 10m, 2h) before the stall watchdog warns.",
        json_schema_extra={"pattern": r"^[0-9]+(\.[0-9]+)?[smh]$"},
    )

    @field_validator("max_duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @field_validator("algorithms")
    @classmethod
    def _unique_algorithms(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("algorithms must name at least one algorithm")
            dupes = sorted({a for a in value if value.count(a) > 1})
            if dupes:
                raise ValueError(f"algorithm listed twice: {', '.join(dupes)}")
        return value


class MetricDecl(_Strict):
    instrument: Instrument
    unit: str = Field(min_length=1, description="UCUM unit: s, By, 1, {token}, ...")
    brief: str = Field(min_length=1)
    from_: list[str] | None = Field(
        default=None,
        alias="from",
        description="Logger keys that feed the metric; the first present in a record wins.",
    )
    span: str | list[str] | None = Field(
        default=None, description="Span name(s) (or template) whose duration the metric records."
    )
    attributes: list[str] = Field(default_factory=list, description="Declared attribute keys.")
    buckets: list[float] | None = Field(
        default=None,
        min_length=1,
        description="A histogram's bucket boundaries, increasing, in its unit (a convention's "
        "advice, e.g. OpenTelemetry's for gen_ai.client.operation.duration); default: for unit "
        "s, 5 ms to ~1.4 h, else the SDK's.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def spans(self) -> tuple[str, ...]:
        if self.span is None:
            return ()
        return (self.span,) if isinstance(self.span, str) else tuple(self.span)


class ConventionsDecl(_Strict):
    """What the program that owns the registry calls things. spanspec names no application: its
    settings, its group override and its trace readers take these words from here."""

    env_prefix: EnvPrefix | None = Field(
        default=None,
        description="Settings are read from $<env_prefix><NAME> (e.g. MYAPP_OTEL_ENABLED), and "
        "$<env_prefix>SPAN_GROUPS overrides the groups at activation. None: only the SDK's "
        "OTEL_* variables apply.",
    )
    env_fallback_prefixes: list[EnvPrefix] = Field(
        default_factory=list,
        description="Prefixes read, in order, where the env_prefix variable is unset (a "
        "predecessor's names); needs env_prefix.",
    )
    service_name: str | None = Field(
        default=None,
        min_length=1,
        description="The default OpenTelemetry service.name of the program's processes "
        "(OTEL_SERVICE_NAME and the service_name setting win).",
    )
    step_span: DottedName | None = Field(
        default=None,
        description="What one step is, for every reader (breakdown, view, report): a declared "
        "span name or {algorithm} template.",
    )
    step_attribute: AttributeKey | None = Field(
        default=None,
        description="The declared int attribute of the step span that numbers steps "
        "(`spanspec view --step N`); needs step_span.",
    )
    run_attribute: AttributeKey | None = Field(
        default=None,
        description="The declared attribute every process of one run carries on its resource "
        "(a run id): readers tell runs apart by it (`--run-id`).",
    )
    lane_attributes: list[AttributeKey] = Field(
        default_factory=list,
        description="Declared resource attributes naming a process's lane in views and reports, "
        "most significant first (e.g. a worker group, then a rank). None: service.name and "
        "process.pid.",
    )
    main_lane: str | None = Field(
        default=None,
        min_length=1,
        description="The value of the first lane attribute that marks the main process: its lane "
        "is drawn first and named by that value alone; needs lane_attributes.",
    )
    report_attributes: list[AttributeKey] = Field(
        default_factory=list,
        description="Declared resource attributes a report's header shows (e.g. the model).",
    )
    peak_attributes: list[AttributeKey] = Field(
        default_factory=list,
        description="Declared numeric span attributes that hold a peak (e.g. memory high-water "
        "marks): the breakdown and the report show their maximum per phase and lane, after "
        "rss_peak_attribute and rss_rise_attribute.",
    )
    cpu_attribute: AttributeKey | None = Field(
        default=None,
        description="A declared numeric span attribute holding the CPU seconds the span's process "
        "spent inside it, measured by the runtime on every span that declares it: the breakdown "
        "and the report show CPU / wall per phase and lane, so time lost to a busy machine shows.",
    )
    rss_peak_attribute: AttributeKey | None = Field(
        default=None,
        description="A declared numeric span attribute holding the process's resident-memory "
        "high-water mark within the span (bytes), measured by the runtime on every span that "
        "declares it; readers show it with the peak_attributes.",
    )
    rss_rise_attribute: AttributeKey | None = Field(
        default=None,
        description="A declared numeric span attribute holding how far that mark rose above the "
        "resident memory at the span's start (bytes): what the span itself needed. Measured "
        "like rss_peak_attribute; readers show it with the peak_attributes.",
    )


class Registry(_Strict):
    """The whole registry file."""

    version: int = Field(strict=True, ge=1, le=1, description="The registry format; only 1 exists.")
    groups: dict[Word, GroupDecl]
    presets: dict[Word, list[str]] = Field(default_factory=dict)
    attributes: dict[DottedName, AttributeDecl] = Field(default_factory=dict)
    spans: list[SpanDecl] = Field(default_factory=list)
    metrics: dict[DottedName, MetricDecl] = Field(default_factory=dict)
    conventions: ConventionsDecl = Field(
        default_factory=ConventionsDecl,
        description="What the owning program calls things (env prefix, step span, run and lane "
        "attributes); neutral defaults when absent.",
    )


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the registry file, for editors (``yaml-language-server``)."""
    schema = Registry.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "spanspec registry"
    return schema
