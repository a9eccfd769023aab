"""Markdown reference tables generated from a compiled registry.

``spanspec docs --out DIR`` writes ``DIR/reference.md``: the conventions, groups, presets,
attributes, spans (each declaration once, and which algorithms each template expands to) and
metrics. The output
depends only on the registry's content, so a test can hold the committed file to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spanspec.spec import (
    ALGORITHM_PLACEHOLDER,
    GROUPS_OVERRIDE_NAME,
    Conventions,
    SpanEntry,
    Spec,
    format_duration,
)

__all__ = ["REFERENCE_FILE", "render_reference"]

REFERENCE_FILE = "reference.md"


@dataclass(frozen=True)
class _Declaration:
    """One span entry of the registry: a template and its expansions, or a plain name."""

    template: str
    entry: SpanEntry
    algorithms: tuple[str, ...]


def _declarations(spec: Spec) -> list[_Declaration]:
    by_template: dict[str, list[SpanEntry]] = {}
    for entry in spec.spans.values():
        by_template.setdefault(entry.template, []).append(entry)
    return [
        _Declaration(t, es[0], tuple(e.algorithm for e in es if e.algorithm))
        for t, es in by_template.items()
    ]


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _code(text: object) -> str:
    return f"`{text}`"


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _per_algorithm_legend(emitted: frozenset[str] | None) -> list[str]:
    what = f"each template with `{ALGORITHM_PLACEHOLDER}` replaced by the column's algorithm"
    if emitted is None:
        return [f"Which phases each algorithm declares: {what}."]
    return [
        f"Which phases each algorithm's code emits ({what}), from the code scan "
        "(`spanspec docs --code`): ✓ emitted by the code; · declared in the registry but emitted "
        "by no scanned call."
    ]


def _per_algorithm_cell(d: _Declaration, algorithm: str, emitted: frozenset[str] | None) -> str:
    if algorithm not in d.algorithms:
        return ""
    if emitted is None:
        return "✓"
    return "✓" if d.template.replace(ALGORITHM_PLACEHOLDER, algorithm) in emitted else "·"


def _conventions(c: Conventions) -> list[str]:
    """The conventions block as a table: what spanspec reads from the registry."""

    def codes(values: Sequence[str]) -> str:
        return ", ".join(_code(v) for v in values) or "–"

    def one(value: str | None) -> str:
        return _code(value) if value else "–"

    rows = [
        [
            _code("env_prefix"),
            one(c.env_prefix),
            f"settings are read from `$<prefix><NAME>`; `$<prefix>{GROUPS_OVERRIDE_NAME}` "
            "overrides the groups",
        ],
        [_code("env_fallback_prefixes"), codes(c.env_fallback_prefixes), "read where unset"],
        [_code("service_name"), one(c.service_name), "the default `service.name`"],
        [_code("step_span"), one(c.step_span), "what one step is, for every trace reader"],
        [_code("step_attribute"), one(c.step_attribute), "the attribute numbering steps"],
        [_code("run_attribute"), one(c.run_attribute), "the resource attribute naming a run"],
        [_code("lane_attributes"), codes(c.lane_attributes), "resource attributes naming a lane"],
        [_code("main_lane"), one(c.main_lane), "the main process's lane, drawn first"],
        [_code("report_attributes"), codes(c.report_attributes), "shown in a report's header"],
        [_code("peak_attributes"), codes(c.peak_attributes), "peaks shown per phase and lane"],
        [
            _code("cpu_attribute"),
            one(c.cpu_attribute),
            "CPU seconds, measured on each span declaring it: CPU / wall per phase and lane",
        ],
        [
            _code("rss_peak_attribute"),
            one(c.rss_peak_attribute),
            "resident-memory high-water mark, measured on each span declaring it",
        ],
        [
            _code("rss_rise_attribute"),
            one(c.rss_rise_attribute),
            "that mark's rise over the span's start, measured likewise",
        ],
    ]
    return [
        "## Conventions",
        "",
        "What the program calls things, read by spanspec's settings, group override, runtime "
        "(the measured attributes) and trace readers (`view`, `live-check`, `report`).",
        "",
        *_table(["key", "value", "meaning"], rows),
    ]


def render_reference(
    spec: Spec,
    source_name: str = "the registry",
    emitted: frozenset[str] | None = None,
    command: str = "spanspec docs --out <this folder>",
) -> str:
    """Return the Markdown reference of ``spec``.

    ``source_name`` is how the registry is named in the header (not read; no paths of this
    machine end up in the file), ``command`` the command that regenerates the file. ``emitted`` (the names the scanned code can emit, from
    :func:`spanspec.checks.codecheck.emitted_names`) makes the spans-per-algorithm table say what the
    code really emits rather than what the registry declares.
    """
    declarations = _declarations(spec)
    spans_per_group: dict[str, int] = {}
    for entry in spec.spans.values():
        spans_per_group[entry.group] = spans_per_group.get(entry.group, 0) + 1

    out = [
        "<!-- Generated by `spanspec docs` from the registry. Do not edit by hand: edit the",
        f"     registry ({source_name}) and run `{command}`. -->",
        "",
        "# Telemetry reference",
        "",
        f"Everything the program can emit, from `{source_name}` (registry version "
        f"{spec.version}): {len(spec.groups)} groups, {len(spec.presets)} presets, "
        f"{len(spec.attributes)} attributes, {len(spec.spans)} span names from "
        f"{len(declarations)} declarations, {len(spec.metrics)} metrics.",
        "",
        *_conventions(spec.conventions),
        "## Groups",
        "",
        "A group is what `span_groups` switches on and off. The bucket says what kind of time a "
        "group measures; umbrella groups have none, so time summed by bucket never counts twice.",
        "",
    ]
    out += _table(
        ["group", "bucket", "spans", "description"],
        (
            [_code(g.name), g.bucket or "–", spans_per_group.get(g.name, 0), g.description]
            for g in spec.groups.values()
        ),
    )

    out += [
        "## Presets",
        "",
        "A group expression is a comma list of presets and groups; `-name` takes one away, e.g. "
        "`per_step,-generation`. `all` always means every group.",
        "",
    ]
    preset_rows = [
        [
            _code(name),
            ", ".join(_code(m) for m in members),
            "the groups named"
            if all(m in spec.groups for m in members)
            else ", ".join(_code(g) for g in _ordered(spec, spec.resolve(name))),
        ]
        for name, members in spec.presets.items()
    ]
    if "all" not in spec.presets:
        preset_rows.append([_code("all"), "(implicit)", "every group"])
    out += _table(["preset", "names", "enables"], preset_rows)

    out += ["## Attributes", ""]
    out += _table(
        ["attribute", "type", "allowed values", "sensitive", "cardinality", "meaning"],
        (
            [
                _code(a.key),
                _code(a.type),
                ", ".join(_code(v) for v in _sorted_values(a.allowed)) if a.allowed else "any",
                "yes (redacted)" if a.sensitive else "no",
                a.cardinality,
                a.brief,
            ]
            for a in spec.attributes.values()
        ),
    )

    out += [
        "## Spans",
        "",
        f"A name with `{ALGORITHM_PLACEHOLDER}` stands for one span per algorithm listed. "
        "Attributes: **required**, recommended, *opt-in*; `key` = `value`: a constant the span "
        "always carries (its group's or its own `constants`). Max duration: the stall watchdog warns "
        "once when the span stays open longer (see `watchdog.md`).",
        "",
    ]
    out += _table(
        ["span", "group", "algorithms", "attributes", "max duration", "meaning"],
        (
            [
                _code(d.template),
                _code(d.entry.group),
                ", ".join(d.algorithms) if d.algorithms else "–",
                _attribute_list(d.entry),
                _duration(d.entry.max_duration_s),
                d.entry.brief,
            ]
            for d in declarations
        ),
    )

    templated = [d for d in declarations if d.algorithms]
    if templated and spec.algorithms:
        out += ["## Spans per algorithm", "", *_per_algorithm_legend(emitted), ""]
        out += _table(
            ["span", *(_code(a) for a in spec.algorithms)],
            (
                [
                    _code(d.template),
                    *(_per_algorithm_cell(d, a, emitted) for a in spec.algorithms),
                ]
                for d in templated
            ),
        )

    out += [
        "## Metrics",
        "",
        "Fed by logger keys (the first key present in a logged record wins), by the duration of "
        "spans, or recorded in code.",
        "",
    ]
    out += _table(
        ["metric", "instrument", "unit", "fed by", "attributes", "meaning"],
        (
            [
                _code(m.name),
                m.instrument,
                _code(m.unit),
                _fed_by(m.from_keys, m.span_templates),
                ", ".join(_code(a) for a in m.attributes) or "–",
                m.brief,
            ]
            for m in spec.metrics.values()
        ),
    )
    return "\n".join(out).rstrip("\n") + "\n"


def _ordered(spec: Spec, groups: Iterable[str]) -> list[str]:
    chosen = set(groups)
    return [g for g in spec.groups if g in chosen]


def _sorted_values(values: Iterable[object]) -> list[object]:
    return sorted(values, key=lambda v: (type(v).__name__, str(v)))


def _duration(seconds: float | None) -> str:
    return "–" if seconds is None else format_duration(seconds)


def _attribute_list(entry: SpanEntry) -> str:
    items = []
    for key, requirement in entry.requirements.items():
        if key in entry.constants:
            items.append(f"{_code(key)} = {_code(entry.constants[key])}")
        elif requirement == "required":
            items.append(f"**{_code(key)}**")
        elif requirement == "opt_in":
            items.append(f"*{_code(key)}*")
        else:
            items.append(_code(key))
    return ", ".join(items) or "–"


def _fed_by(keys: Sequence[str], spans: Sequence[str]) -> str:
    if keys:
        return "logger " + ", ".join(_code(k) for k in keys)
    if spans:
        return "duration of " + ", ".join(_code(s) for s in spans)
    return "code"
