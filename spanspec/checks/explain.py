"""What a group expression enables, as data and as the text table of ``spanspec groups``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spanspec.spec import Spec

__all__ = ["GroupsReport", "explain_groups"]


@dataclass(frozen=True)
class GroupsReport:
    """The groups an expression turns on (each with what turned it on) and their spans."""

    spec: Spec
    expression: str
    why: dict[str, str]
    spans_of: dict[str, list[str]]

    @property
    def enabled(self) -> list[str]:
        return [g for g in self.spec.groups if g in self.why]

    @property
    def disabled(self) -> list[str]:
        return [g for g in self.spec.groups if g not in self.why]

    def to_dict(self, registry: str) -> dict[str, Any]:
        """The JSON body of ``spanspec groups --format json``; ``registry`` as it is shown."""
        spec, why, spans_of = self.spec, self.why, self.spans_of
        return {
            "expression": self.expression,
            "registry": registry,
            "groups": {
                g: {"via": why[g], "bucket": spec.groups[g].bucket, "spans": spans_of[g]}
                for g in self.enabled
            },
            "disabled": self.disabled,
            "spans": {n: spec.spans[n].group for g in self.enabled for n in spans_of[g]},
        }

    def format_table(self) -> str:
        """The text report: a table of enabled groups, the disabled ones, the enabled spans."""
        spec, why, spans_of, enabled = self.spec, self.why, self.spans_of, self.enabled
        rows = [("group", "bucket", "turned on by", "spans")]
        rows += [(g, spec.groups[g].bucket or "-", why[g], str(len(spans_of[g]))) for g in enabled]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        total = sum(len(spans_of[g]) for g in enabled)
        lines = [
            f"{self.expression!r}: {len(enabled)} of {len(spec.groups)} groups, "
            f"{total} of {len(spec.spans)} spans enabled",
            "",
        ]
        lines += [
            f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>5}"
            for r in rows
        ]
        lines += ["", f"disabled groups: {', '.join(self.disabled) or '(none)'}", ""]
        if total:
            lines.append("enabled spans:")
            name_width = max(len(n) for g in enabled for n in spans_of[g])
            for g in enabled:
                for n in spans_of[g]:
                    lines.append(f"  {n:<{name_width}}  {g} ({why[g]})")
        return "\n".join(lines).rstrip()


def explain_groups(spec: Spec, expression: str) -> GroupsReport:
    """Resolve ``expression`` against ``spec``.

    Raises:
        SpecError: naming each unknown word of the expression.
    """
    why = spec.explain(expression)
    spans_of: dict[str, list[str]] = {g: [] for g in spec.groups}
    for name, entry in spec.spans.items():
        spans_of[entry.group].append(name)
    return GroupsReport(spec, expression, why, spans_of)
