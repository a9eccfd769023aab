"""spanspec.registry.compile: template expansion, cross-reference checks, and the compiled tables."""

from __future__ import annotations

import textwrap

import pytest

import spanspec
from spanspec.spec import AttributeDef

BASE = """
version: 1
groups:
  job: {description: The run.}
  step: {description: One step., bucket: productive}
attributes:
  rl.iteration: {type: int, brief: Step index., cardinality: high}
  rl.algorithm: {type: string, brief: Algorithm., allowed: [grpo, ppo]}
  rl.tags: {type: "string[]", brief: Tags.}
"""


def load(tmp_path, extra: str) -> spanspec.Spec:
    path = tmp_path / "registry.yaml"
    path.write_text(textwrap.dedent(BASE) + textwrap.dedent(extra))
    return spanspec.load(path)


def problems(tmp_path, extra: str) -> list[spanspec.Finding]:
    with pytest.raises(spanspec.SpecError) as info:
        load(tmp_path, extra)
    return list(info.value.findings)


def test_templates_expand_once_per_algorithm(tmp_path):
    spec = load(
        tmp_path,
        """
        spans:
          - name: rl.{algorithm}.step
            algorithms: [ppo, grpo]
            group: step
            brief: One step.
            attributes: {rl.iteration: required, rl.algorithm: recommended}
          - name: rl.worker.step
            group: step
            brief: Worker side.
        metrics:
          rl.step.duration: {instrument: histogram, unit: s, brief: Step time., span: "rl.{algorithm}.step"}
        """,
    )
    assert list(spec.spans) == ["rl.ppo.step", "rl.grpo.step", "rl.worker.step"]
    assert spec.algorithms == ("ppo", "grpo")
    entry = spec.spans["rl.grpo.step"]
    assert (entry.group, entry.template, entry.algorithm) == ("step", "rl.{algorithm}.step", "grpo")
    assert entry.required == {"rl.iteration"}
    assert dict(entry.requirements) == {"rl.iteration": "required", "rl.algorithm": "recommended"}
    assert spec.spans["rl.worker.step"].algorithm is None
    assert spec.spans_of_template("rl.{algorithm}.step") == {"rl.ppo.step", "rl.grpo.step"}
    assert spec.spans_of_template("rl.worker.step") == {"rl.worker.step"}
    assert spec.metrics["rl.step.duration"].spans == {"rl.ppo.step", "rl.grpo.step"}
    assert spec.enabled_spans("step") == set(spec.spans)
    assert spec.enabled_spans("job") == frozenset()


def test_every_cross_reference_problem_is_reported_at_once(tmp_path):
    found = problems(
        tmp_path,
        """
        presets:
          job: [step]
          loop: [loop]
          some: [stepp]
        spans:
          - name: rl.{algorithm}.step
            group: step
            brief: No algorithms.
          - name: rl.plain
            algorithms: [grpo]
            group: jobb
            brief: Algorithms without placeholder.
            attributes: {rl.iter: required}
        metrics:
          rl.a: {instrument: gauge, unit: "1", brief: Both., from: [x], span: rl.plain}
          rl.b: {instrument: gauge, unit: s, brief: Gauge from span., span: rl.plain}
          rl.c: {instrument: histogram, unit: "1", brief: High card., attributes: [rl.iteration, rl.nope]}
        """,
    )
    assert sorted(f.id for f in found) == [
        "metric.high_cardinality_attribute",
        "metric.span_needs_histogram",  # rl.a
        "metric.span_needs_histogram",  # rl.b
        "metric.two_sources",
        "metric.unknown_attribute",
        "preset.cycle",
        "preset.shadows_group",
        "preset.unknown_member",
        "span.algorithms_without_placeholder",
        "span.missing_algorithms",
        "span.unknown_attribute",
        "span.unknown_group",
    ]
    assert all(f.file.endswith("registry.yaml") and f.line > 1 for f in found)


def test_allowed_values_must_have_the_declared_type(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(
        "version: 1\n"
        "groups: {job: {description: The run.}}\n"
        "attributes:\n"
        "  rl.count: {type: int, brief: A count., allowed: [1, two]}\n"
    )
    with pytest.raises(spanspec.SpecError) as info:
        spanspec.load(path)
    (f,) = info.value.findings
    assert f.id == "attribute.allowed_type"
    assert f.message == "attributes.rl.count.allowed: 'two' is not an int"
    assert (f.line, f.col) == (4, 55)


def test_improvements_alone_do_not_raise(tmp_path):
    spec = load(
        tmp_path,
        """
        spans: []
        metrics:
          rl.step.seconds: {instrument: gauge, unit: s, brief: Unit in the name., from: [t]}
        """,
    )
    assert "rl.step.seconds" in spec.metrics


@pytest.mark.parametrize(
    ("type_", "good", "bad"),
    [
        ("string", ["x"], [1, None, ["x"]]),
        ("int", [0, -3], [True, 1.5, "1"]),
        ("float", [1.5, 2], [True, "1.5"]),
        ("bool", [True, False], [0, "true"]),
        ("string[]", [["a"], (), ("a", "b")], ["a", [1], [None]]),
        ("int[]", [[1, 2]], [[True], [1.0]]),
    ],
)
def test_attribute_types(type_, good, bad):
    decl = AttributeDef("k", type_, "brief")
    assert all(decl.accepts(v) for v in good)
    assert not any(decl.accepts(v) for v in bad)


def test_allowed_values_bound_an_attribute():
    decl = AttributeDef("k", "string", "brief", allowed=frozenset({"grpo", "ppo"}))
    assert decl.accepts("ppo") and not decl.accepts("sft")
