"""spanspec.checks.codescan: span names and attributes in Python sources, checked without running them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import spanspec
from spanspec.checks.codecheck import check_calls
from spanspec.checks.codescan import scan_paths, scan_source
from spanspec.registry.compile import compile_registry
from spanspec.registry.loader import load_registry

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


def check(spec, code, **kwargs):
    """Findings for a snippet, without the unused-span report."""
    scan = scan_source(textwrap.dedent(code), "mod.py")
    kwargs.setdefault("report_unused", False)
    return check_calls(spec, scan, **kwargs)


def only(findings, id_):
    found = [f for f in findings if f.id == id_]
    assert len(found) == 1, [str(f) for f in findings]
    return found[0]


def test_declared_literal_names_pass(spec):
    findings = check(
        spec,
        """
        import spanspec
        from spanspec import span, traced

        with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}):
            pass
        with span("rl.worker.optimizer_step"):
            pass

        @traced("rl.worker.optimizer_step")
        def step(): ...
        """,
    )
    assert findings == []


def test_undeclared_name_points_at_the_argument_with_a_suggestion(spec):
    f = only(
        check(spec, 'x = 1\nwith timer.span(\n    "rl.grpo.stpe"):\n    pass\n'),
        "code.undeclared_span",
    )
    assert (f.file, f.line, f.col, f.level) == ("mod.py", 3, 5, "violation")
    assert f.message == (
        "span(): span 'rl.grpo.stpe' is not declared in the registry (did you mean 'rl.grpo.step'?)"
    )


def test_a_template_is_not_a_name(spec):
    f = only(check(spec, 'span("rl.{algorithm}.step")'), "code.undeclared_span")
    assert "use a concrete name" in f.message


def test_non_literal_names(spec):
    findings = check(
        spec,
        """
        def run(phase):
            with spanspec.span(phase):
                pass
            with spanspec.span("rl." + phase):
                pass
        """,
    )
    found = [f for f in findings if f.id == "code.non_literal_name"]
    assert [(f.line, f.col) for f in found] == [(3, 24), (5, 24)]
    assert "the span name phase is not a string literal" in found[0].message
    assert "# spanspec: ignore" in found[0].message


def test_module_constants_resolve(spec):
    code = """
        STEP = "rl.grpo.step"
        TYPO = "rl.grpo.stp"
        span(STEP, **{"rl.iteration": 0})
        span(TYPO)
    """
    assert [f.id for f in check(spec, code)] == ["code.undeclared_span"]


def test_f_strings_stand_for_the_names_they_match(spec):
    code = """
        def phase(algo, i):
            with span(f"rl.{algo}.value_update", **{"rl.iteration": i}):
                pass
            with span(f"rl.{algo}.no_such_phase"):
                pass
    """
    findings = check(spec, code)
    info = only(findings, "code.templated_name")
    assert (
        info.level == "information"
        and "can stand for 1 declared span(s): rl.ppo.value_update" in info.message
    )
    bad = only(findings, "code.undeclared_span")
    assert bad.message == 'span(): no declared span matches f"rl.{algo}.no_such_phase"'
    scan = scan_source(textwrap.dedent(code), "mod.py")
    unused = check_calls(spec, scan)
    assert not any("value_update" in f.message for f in unused if f.id == "code.unused_span")


def test_wrappers_forwarding_their_parameter_and_ignored_lines_are_skipped(spec):
    code = """
        class Timer:
            def span(self, name, **attributes):
                with spanspec.span(name, **attributes):
                    yield

        def traced(name):
            def decorate(fn):
                def wrapper(*args):
                    with span(name):
                        return fn(*args)
                return wrapper
            return decorate

        with span(dynamic_name):  # spanspec: ignore
            pass
    """
    assert check(spec, code) == []


def test_calls_that_are_not_span_calls(spec):
    code = """
        import re
        m = re.match("a", "a")
        m.span()
        m.span(1)
        spans.one("rl.grpo.stpe")
    """
    assert check(spec, code) == []


def test_attribute_keys_and_literal_values(spec):
    code = """
        span("rl.grpo.step", **{"rl.iteraton": 1})
        span("rl.grpo.step", **{"rl.iteration": "one"})
        span("rl.grpo.job", **{"rl.algorithm": "reinforce"})
        span("rl.worker.generate", **{"gen_ai.provider.name": "torch", "gen_ai.operation.name": "text_completion"}, rank=0)
    """
    findings = check(spec, code)
    by_line = {f.line: f for f in findings if f.level == "violation"}
    assert by_line[2].id == "code.undeclared_attribute"
    assert by_line[2].message == (
        "span(): attribute 'rl.iteraton' is not declared for span 'rl.grpo.step' "
        "(did you mean 'rl.iteration'?)"
    )
    assert by_line[3].id == "code.attribute_type"
    assert (
        "'rl.iteration' of span 'rl.grpo.step' must be an int, got str 'one'" in by_line[3].message
    )
    assert by_line[4].id == "code.attribute_value"
    assert (
        "= 'reinforce' is not one of the declared values: async_grpo, distillation"
        in by_line[4].message
    )
    assert by_line[5].id == "code.undeclared_attribute" and "'rank'" in by_line[5].message


def test_links_is_a_parameter_of_span_not_an_attribute(spec):
    findings = check(spec, 'span("rl.grpo.step", links=[ctx], **{"rl.iteration": 1})')
    assert [f for f in findings if f.level == "violation"] == []


def test_missing_required_attributes_are_an_improvement_when_all_are_visible(spec):
    findings = check(spec, 'span("rl.grpo.step")\nspan("rl.grpo.step", **attrs)\n')
    f = only(findings, "code.missing_required_attribute")
    assert (f.level, f.line) == ("improvement", 1)
    assert "requires 'rl.iteration'" in f.message


def test_unused_spans_point_at_their_declaration(spec):
    registry, located = load_registry(REPO / "schemas" / "span_groups.yaml")
    spec = compile_registry(registry, located)
    scan = scan_source('span("rl.grpo.step", **{"rl.iteration": 0})\n', "mod.py")
    findings = check_calls(spec, scan, located=located, require_used=["rl.grpo.*"])
    unused = [f for f in findings if f.id == "code.unused_span"]
    assert {f.level for f in unused} == {"improvement", "violation"}
    step = [f for f in unused if "rl.{algorithm}.step" in f.message]
    assert [f.level for f in step] == ["improvement"]  # grpo is used; the others are not required
    assert "never used in the scanned code for: ppo, sft" in step[0].message
    assert step[0].message.endswith("async_grpo")  # declared apart, with its own attributes
    text = (REPO / "schemas" / "span_groups.yaml").read_text().splitlines()
    assert text[step[0].line - 1].strip() == "- name: rl.{algorithm}.step"
    required = [f for f in unused if f.level == "violation"]
    assert any(
        "'rl.{algorithm}.rollout'" in f.message and "for: grpo " in f.message for f in required
    )
    assert all("required by --require-used 'rl.grpo.*'" in f.message for f in required)


def test_a_require_used_pattern_matching_nothing(spec):
    findings = check_calls(spec, scan_source("", "m.py"), require_used=["rl.nope.*"])
    assert only(findings, "code.require_used_unmatched").level == "violation"


def test_syntax_errors_and_missing_paths_are_findings(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "skipped.py").write_text("span('rl.nope')\n")
    (tmp_path / "latin1.py").write_bytes(b"x = '\xe9'\n")
    scan = scan_paths([tmp_path, tmp_path / "missing"])
    ids = sorted((f.id, Path(f.file).name) for f in scan.findings)
    assert ids == [
        ("code.syntax", "broken.py"),
        ("file.unreadable", "latin1.py"),
        ("file.unreadable", "missing"),
    ]
    assert scan.calls == []


def test_the_repository_code_uses_only_declared_names(spec):
    scan = scan_paths([REPO / "spanspec", REPO / "nemo_rl"])
    violations = [str(f) for f in check_calls(spec, scan) if f.level == "violation"]
    assert violations == []
    assert len(scan.calls) > 0


def test_annotate_keys_are_checked_against_the_span_its_with_binds(spec):
    findings = check(
        spec,
        """
        import spanspec

        def step(timer, other):
            with timer.span("rl.grpo.reward", **{"rl.iteration": 1}) as s:
                spanspec.annotate(s, **{"rl.reward.mean": 0.5})
                spanspec.annotate(s, **{"rl.colour": 1})
            with spanspec.span("rl.grpo.evaluate", **{"rl.iteration": 1}) as e:
                spanspec.annotate(e, **{"rl.eval.accuracy": "high"})
            spanspec.annotate(other, **{"anything": 1})
        """,
    )
    undeclared = only(findings, "code.undeclared_attribute")
    assert (undeclared.line, undeclared.col) == (7, 27)  # at the span argument
    assert undeclared.message == (
        "annotate(): attribute 'rl.colour' is not declared for span 'rl.grpo.reward'"
    )
    typed = only(findings, "code.attribute_type")
    assert (
        "attribute 'rl.eval.accuracy' of span 'rl.grpo.evaluate' must be a float" in typed.message
    )
    unresolved = only(findings, "code.unresolved_annotate")
    assert unresolved.level == "information" and unresolved.line == 10
    # A late attribute is never "missing": the span call's own required keys are checked there.
    assert not [f for f in findings if f.id == "code.missing_required_attribute"]


def test_a_binding_is_local_to_its_function(spec):
    findings = check(
        spec,
        """
        import spanspec

        def a(timer):
            with timer.span("rl.grpo.reward", **{"rl.iteration": 1}) as s:
                pass

        def b(s):
            spanspec.annotate(s, **{"rl.reward.mean": 0.5})
        """,
    )
    assert [f.id for f in findings] == ["code.unresolved_annotate"]
