"""spanspec.testing: the `spans` fixture (loaded as a pytest plugin) and capture()."""

from __future__ import annotations

import re

import pytest

import spanspec
from spanspec import runtime
from spanspec.testing import capture


def test_fixture_captures_with_all_groups_strict(spans):
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
        with spanspec.span("rl.grpo.rollout", **{"rl.iteration": 0}):
            pass
    assert spans.names() == ["rl.grpo.rollout", "rl.grpo.step"]
    assert spans.children(spans.one("rl.grpo.step")) == [spans.one("rl.grpo.rollout")]
    assert spans.groups == spans.spec.resolve("all")
    with pytest.raises(spanspec.SpecError):
        spanspec.span("undeclared.name")


@pytest.mark.spanspec(groups="default", strict=False)
def test_marker_sets_groups_and_strictness(spans):
    with spanspec.span("rl.grpo.rollout"):
        pass
    with spanspec.span("undeclared.name"):
        pass
    assert spans.names() == ["undeclared.name"]


def test_state_is_reset_after_each_test():
    assert not runtime.is_active()
    assert spanspec.span("rl.grpo.rollout") is runtime.NOOP


def test_capture_with_registry_path_and_one_assertion(tmp_path):
    registry = tmp_path / "r.yaml"
    registry.write_text(
        "version: 1\ngroups: {work: {description: d, bucket: productive}}\n"
        "spans: [{name: app.work, group: work, brief: b}]\n"
    )
    with capture(registry) as spans:
        with spanspec.span("app.work"):
            pass
    assert spans.one("app.work").name == "app.work"
    with pytest.raises(AssertionError, match=re.escape("expected one span 'app.none', found 0")):
        spans.one("app.none")
    assert not runtime.is_active()
