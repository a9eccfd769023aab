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
Word = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
DottedName = Annotated[str, StringConstraints(pattern=_DOTTED)]


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


class GroupDecl(_Strict):
    description: str = Field(min_length=1, description="One line: what the group's spans measure.")
    bucket: Bucket | None = Field(
        default=None, description="Efficiency bucket; none for umbrella groups (job, step)."
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
        description="Expand `rl.{algorithm}.<phase>` once per algorithm; needs the placeholder.",
    )
    attributes: dict[str, Requirement] = Field(default_factory=dict)
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

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def spans(self) -> tuple[str, ...]:
        if self.span is None:
            return ()
        return (self.span,) if isinstance(self.span, str) else tuple(self.span)


class Registry(_Strict):
    """The whole registry file."""

    version: int = Field(strict=True, ge=1, le=1, description="The registry format; only 1 exists.")
    groups: dict[Word, GroupDecl]
    presets: dict[Word, list[str]] = Field(default_factory=dict)
    attributes: dict[DottedName, AttributeDecl] = Field(default_factory=dict)
    spans: list[SpanDecl] = Field(default_factory=list)
    metrics: dict[DottedName, MetricDecl] = Field(default_factory=dict)


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the registry file, for editors (``yaml-language-server``)."""
    schema = Registry.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "spanspec registry"
    return schema
