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
    assert f.message == "attributes.rl.count.allowed[1]: 'two' is not an int"
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


CONVENTIONS_SPANS = """
spans:
  - name: rl.{algorithm}.step
    algorithms: [ppo, grpo]
    group: step
    brief: One step.
    attributes: {rl.iteration: required}
  - name: rl.job
    group: job
    brief: The run.
"""


def test_conventions_compile_into_the_spec(tmp_path):
    spec = load(
        tmp_path,
        textwrap.dedent(
            """
        conventions:
          env_prefix: MYAPP_OTEL_
          env_fallback_prefixes: [OLDAPP_]
          service_name: myapp
          step_span: rl.{algorithm}.step
          step_attribute: rl.iteration
          run_attribute: rl.algorithm
          lane_attributes: [rl.algorithm, rl.iteration]
          main_lane: grpo
          report_attributes: [rl.tags]
        """
        )
        + CONVENTIONS_SPANS,
    )
    c = spec.conventions
    assert (c.env_prefix, c.env_fallback_prefixes, c.service_name) == (
        "MYAPP_OTEL_",
        ("OLDAPP_",),
        "myapp",
    )
    assert c.env_prefixes == ("MYAPP_OTEL_", "OLDAPP_")
    assert c.groups_variable == "MYAPP_OTEL_SPAN_GROUPS"
    assert (c.step_span, c.step_attribute, c.run_attribute) == (
        "rl.{algorithm}.step",
        "rl.iteration",
        "rl.algorithm",
    )
    assert c.lane_attributes == ("rl.algorithm", "rl.iteration") and c.main_lane == "grpo"
    assert c.report_attributes == ("rl.tags",)
    # A step is any expansion of the template, also of an algorithm the registry does not list.
    assert c.is_step_span("rl.grpo.step") and c.is_step_span("rl.dpo.step")
    assert not c.is_step_span("rl.step") and not c.is_step_span("rl.grpo.x.step")


def test_the_measured_attributes_come_first_among_the_peaks(tmp_path):
    c = load(
        tmp_path,
        "  rl.rss: {type: int, brief: Peak.}\n  rl.rise: {type: int, brief: Rise.}\n"
        "  rl.cpu: {type: float, brief: CPU.}\n"
        "conventions:\n  cpu_attribute: rl.cpu\n  rss_peak_attribute: rl.rss\n"
        "  rss_rise_attribute: rl.rise\n  peak_attributes: [rl.iteration, rl.rss]\n"
        + CONVENTIONS_SPANS,
    ).conventions
    assert (c.cpu_attribute, c.rss_peak_attribute, c.rss_rise_attribute) == (
        "rl.cpu",
        "rl.rss",
        "rl.rise",
    )
    assert c.peak_attributes == ("rl.rss", "rl.rise", "rl.iteration")


@pytest.mark.parametrize(
    ("declaration", "word"),
    [("sensitive: true", "sensitive"), ("allowed: [1, 2]", "with allowed values")],
)
def test_a_measured_attribute_cannot_be_sensitive_or_bounded(tmp_path, declaration, word):
    found = problems(
        tmp_path,
        f"  rl.rss: {{type: int, brief: Peak., {declaration}}}\n"
        "conventions:\n  rss_peak_attribute: rl.rss\n" + CONVENTIONS_SPANS,
    )
    hits = [f for f in found if f.id == "conventions.measured_attribute"]
    assert len(hits) == 1, found
    assert (hits[0].line, hits[0].col) == (12, 23)
    assert hits[0].message.startswith(
        f"conventions.rss_peak_attribute: 'rl.rss' is declared {word}; the runtime sets a "
        "memory peak in bytes on every span that declares it: remove"
    )


def test_without_conventions_the_defaults_are_neutral(tmp_path):
    c = load(tmp_path, CONVENTIONS_SPANS).conventions
    assert c == spanspec.spec.Conventions()
    assert (c.env_prefix, c.env_prefixes, c.groups_variable, c.step_span) == (None, (), None, None)
    assert not c.is_step_span("rl.grpo.step")


def test_the_shipped_registry_names_nemo_rls_conventions():
    c = spanspec.load().conventions
    assert c.env_prefixes == ("NEMO_RL_OTEL_", "NEMO_LENS_")
    assert c.groups_variable == "NEMO_RL_OTEL_SPAN_GROUPS"
    assert (c.step_span, c.step_attribute, c.run_attribute) == (
        "rl.{algorithm}.step",
        "rl.iteration",
        "rl.run_id",
    )


@pytest.mark.parametrize(
    ("block", "where", "id_", "message"),
    [
        (
            "step_span: rl.{algorithm}.stpe",
            (11, 14),
            "conventions.unknown_span",
            "conventions.step_span: span 'rl.{algorithm}.stpe' is not declared "
            "(did you mean 'rl.{algorithm}.step'?)",
        ),
        (
            "step_span: rl.job\n  step_attribute: rl.iteratoin",
            (12, 19),
            "conventions.unknown_attribute",
            "conventions.step_attribute: attribute 'rl.iteratoin' is not declared under "
            "'attributes' (did you mean 'rl.iteration'?)",
        ),
        (
            "step_span: rl.{algorithm}.step\n  step_attribute: rl.algorithm",
            (12, 19),
            "conventions.step_attribute_type",
            "conventions.step_attribute: 'rl.algorithm' is a string; steps are numbered by an "
            "int attribute",
        ),
        (
            "step_span: rl.job\n  step_attribute: rl.iteration",
            (12, 19),
            "conventions.step_attribute_not_on_step",
            "'rl.iteration' is not an attribute of the step span 'rl.job'",
        ),
        (
            "step_attribute: rl.iteration",
            (11, 19),
            "conventions.attribute_without_step",
            "conventions.step_attribute: needs a step_span",
        ),
        (
            "run_attribute: rl.run",
            (11, 18),
            "conventions.unknown_attribute",
            "conventions.run_attribute: attribute 'rl.run' is not declared",
        ),
        (
            "lane_attributes: [rl.algorithm, rl.algorithm]",
            (11, 35),
            "conventions.duplicate",
            "conventions.lane_attributes: 'rl.algorithm' is listed twice",
        ),
        (
            "lane_attributes: [rl.algorithm]\n  main_lane: grop",
            (12, 14),
            "conventions.main_lane_value",
            "'grop' is not an allowed value of 'rl.algorithm' (did you mean 'grpo'?)",
        ),
        (
            "cpu_attribute: rl.algorithm",
            (11, 18),
            "conventions.cpu_attribute_type",
            "conventions.cpu_attribute: 'rl.algorithm' is declared string; it holds CPU "
            "seconds, a number: declare it 'type: float'",
        ),
        (
            "rss_peak_attribute: rl.tags",
            (11, 23),
            "conventions.rss_peak_attribute_type",
            "conventions.rss_peak_attribute: 'rl.tags' is declared string[]; it holds a memory "
            "peak in bytes, a number: declare it 'type: int'",
        ),
        (
            "rss_rise_attribute: rl.rise",
            (11, 23),
            "conventions.unknown_attribute",
            "conventions.rss_rise_attribute: attribute 'rl.rise' is not declared",
        ),
        (
            "cpu_attribute: rl.iteration\n  rss_peak_attribute: rl.iteration",
            (12, 23),
            "conventions.duplicate",
            "conventions.rss_peak_attribute: 'rl.iteration' is also conventions.cpu_attribute; "
            "each measured value needs its own attribute",
        ),
        (
            "cpu_attribute: rl.cpu",
            (11, 18),
            "conventions.unknown_attribute",
            "conventions.cpu_attribute: attribute 'rl.cpu' is not declared",
        ),
        (
            "main_lane: driver",
            (11, 14),
            "conventions.main_lane_without_lanes",
            "conventions.main_lane: needs lane_attributes",
        ),
        (
            "env_prefix: APP_\n  env_fallback_prefixes: [APP_OLD_]",
            (12, 27),
            "conventions.prefix_overlap",
            "'APP_OLD_' overlaps 'APP_'",
        ),
        (
            "env_prefix: OTEL_",
            (11, 15),
            "conventions.otel_prefix",
            "'OTEL_' is the OpenTelemetry SDK's own prefix",
        ),
        (
            "env_fallback_prefixes: [OLD_]",
            (11, 26),
            "conventions.fallback_without_prefix",
            "needs an env_prefix to fall back from",
        ),
        (
            "env_prefix: my-app",
            (11, 15),
            "schema.string_pattern_mismatch",
            "conventions.env_prefix: expected an environment-variable prefix such as "
            "'MYAPP_OTEL_' (upper-case A-Z, 0-9 and _, starting with a letter, ending with _), "
            "got 'my-app' (did you mean 'MY_APP_'?)",
        ),
        (
            "stepspan: rl.job",
            (11, 3),
            "schema.unknown_key",
            "conventions.stepspan: unknown key (did you mean 'step_span'?)",
        ),
    ],
)
def test_each_conventions_mistake_is_a_placed_finding(tmp_path, block, where, id_, message):
    # BASE takes lines 1-9, so the block's first line is line 11.
    found = problems(tmp_path, f"conventions:\n  {block}\n" + CONVENTIONS_SPANS)
    hits = [f for f in found if f.id == id_]
    assert hits, found
    assert (hits[0].line, hits[0].col) == where, hits[0]
    assert message in hits[0].message


CONSTANTS = """
version: 1
groups:
  job: {description: The run.}
  step: {description: One step., bucket: productive, constants: {kind: CHAIN}}
attributes:
  kind: {type: string, brief: A backend's kind of span., allowed: [CHAIN, LLM]}
  rl.iteration: {type: int, brief: Step index.}
spans:
  - name: rl.{algorithm}.step
    algorithms: [grpo]
    group: step
    brief: One step.
    attributes: {rl.iteration: required}
  - name: rl.worker.generate
    group: step
    brief: A model call.
    constants: {kind: LLM}
  - name: rl.job
    group: job
    brief: The run.
"""


def test_constants_of_a_group_and_a_span_compile_into_each_entry(tmp_path):
    """A group's constants reach every span of it, a span's own go over them; each is an
    attribute the span carries (recommended: traces written before it was declared lack it)."""
    path = tmp_path / "registry.yaml"
    path.write_text(CONSTANTS)
    spec = spanspec.load(path)
    step = spec.spans["rl.grpo.step"]
    assert dict(step.constants) == {"kind": "CHAIN"}
    assert step.required == {"rl.iteration"} and step.requirements["kind"] == "recommended"
    assert dict(spec.spans["rl.worker.generate"].constants) == {"kind": "LLM"}
    assert (
        dict(spec.spans["rl.job"].constants) == {} and "kind" not in spec.spans["rl.job"].attributes
    )


def test_a_constant_must_be_a_declared_attribute_with_an_allowed_value(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(
        CONSTANTS.replace("constants: {kind: CHAIN}", "constants: {knd: CHAIN}").replace(
            "constants: {kind: LLM}", "constants: {kind: TOOL}"
        )
    )
    with pytest.raises(spanspec.SpecError) as info:
        spanspec.load(path)
    found = {(f.id, f.line): f.message for f in info.value.findings}
    assert found == {
        ("constant.unknown_attribute", 5): (
            "groups.step: constant 'knd' is not declared under 'attributes' (did you mean 'kind'?)"
        ),
        ("constant.bad_value", 18): (
            "spans[1] 'rl.worker.generate': constant 'kind' = 'TOOL' is not a string in "
            "['CHAIN', 'LLM']"
        ),
    }
