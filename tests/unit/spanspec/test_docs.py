"""spanspec.checks.docs: the Markdown reference, and the freshness of the committed copy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import spanspec
from spanspec.checks.codecheck import emitted_names
from spanspec.checks.codescan import scan_paths, scan_source
from spanspec.checks.docs import render_reference
from spanspec.registry.schema import json_schema

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs" / "observability" / "reference.md"
GUIDE = REPO / "docs" / "observability" / "README.md"
SCHEMA = REPO / "schemas" / "span_groups.schema.json"


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


@pytest.fixture(scope="module")
def text(spec) -> str:
    return render_reference(spec)


# How the header names the registry and the command that regenerates the file.
SOURCE = "schemas/span_groups.yaml"
COMMAND = "spanspec docs --out <this folder> --code nemo_rl --code examples"


def test_the_committed_reference_is_fresh(spec):
    # The spans-per-algorithm table says what the code really emits, from the code scan; the
    # pipeline example has its own registry and is left out.
    code = [REPO / "nemo_rl", REPO / "examples"]
    scan = scan_paths(code, exclude=[REPO / "examples" / "pipeline"])
    emitted = emitted_names(spec, scan)
    assert REFERENCE.read_text(encoding="utf-8") == render_reference(
        spec, SOURCE, emitted, COMMAND
    ), (
        "docs/observability/reference.md is out of date: run "
        "`spanspec docs --out docs/observability --code nemo_rl --code examples`"
    )


def test_spans_per_algorithm_marks_what_the_scanned_code_emits(spec):
    code = 'import spanspec\nwith spanspec.span("rl.sft.step"):\n    pass\n'
    emitted = emitted_names(spec, scan_source(code, "loop.py"))
    table = render_reference(spec, emitted=emitted).split("## Spans per algorithm")[1]
    header = next(line for line in table.splitlines() if line.startswith("| span"))
    columns = [c.strip(" `") for c in header.strip("|").split("|")]
    step = next(line for line in table.splitlines() if line.startswith("| `rl.{algorithm}.step`"))
    cells = dict(zip(columns, [c.strip() for c in step.strip("|").split("|")], strict=True))
    assert cells["sft"] == "✓"
    assert cells["grpo"] == cells["dpo"] == "·"  # declared, but nothing scanned emits them


def test_the_committed_json_schema_is_fresh():
    assert SCHEMA.read_text(encoding="utf-8") == json.dumps(json_schema(), indent=2) + "\n", (
        "schemas/span_groups.schema.json is out of date: run "
        "`spanspec schema --out schemas/span_groups.schema.json`"
    )


def test_every_group_preset_attribute_template_and_metric_is_listed(spec, text):
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == [
        "## Conventions",
        "## Groups",
        "## Presets",
        "## Attributes",
        "## Spans",
        "## Spans per algorithm",
        "## Metrics",
    ]
    rows = {
        line.split(" | ")[0].removeprefix("| ")
        for line in text.splitlines()
        if line.startswith("| `")
    }
    assert {f"`{g}`" for g in spec.groups} <= rows
    assert {f"`{p}`" for p in spec.presets} <= rows
    assert {f"`{a}`" for a in spec.attributes} <= rows
    assert {f"`{e.template}`" for e in spec.spans.values()} <= rows
    assert {f"`{m}`" for m in spec.metrics} <= rows


def test_rows_say_what_a_reader_needs(text):
    lines = text.splitlines()
    step = next(line for line in lines if line.startswith("| `rl.{algorithm}.step` | `step`"))
    assert "**`rl.iteration`**" in step and "grpo, ppo" in step and "async_grpo" in step
    matrix = next(
        line
        for line in lines
        if line.startswith("| `rl.{algorithm}.value_update` |") and "✓" in line
    )
    assert matrix.count("✓") == 1
    prompt = next(line for line in lines if line.startswith("| `gen_ai.prompt`"))
    assert "yes (redacted)" in prompt and "`string[]`" in prompt
    duration = next(line for line in lines if line.startswith("| `rl.step.duration`"))
    assert "duration of `rl.{algorithm}.step`" in duration and "histogram" in duration


def test_cells_are_escaped_and_the_output_is_deterministic(tmp_path):
    registry = tmp_path / "r.yaml"
    registry.write_text(
        "version: 1\n"
        "groups:\n  job:\n    description: 'a | b'\n"
        "spans:\n  - name: rl.run\n    group: job\n    brief: x\n"
    )
    spec = spanspec.load(registry)
    text = render_reference(spec, "r.yaml")
    assert "| `job` | – | 1 | a \\| b |" in text
    assert "`all` | (implicit) | every group" in text
    assert "## Spans per algorithm" not in text
    assert render_reference(spanspec.load(registry), "r.yaml") == text
    assert str(tmp_path) not in text


def test_the_user_guide_names_every_setting_and_live_check_finding():
    from spanspec.settings import FIELDS
    from spanspec.traces import livecheck

    prefix = spanspec.load().conventions.env_prefix  # the guide is the registry's program's
    guide = "\n".join(p.read_text(encoding="utf-8") for p in sorted(GUIDE.parent.glob("*.md")))
    for f in FIELDS:
        assert f"| `{f.name}` | `{f.env_name(prefix)}` |" in guide, f.name
    source = Path(livecheck.__file__).read_text()
    for finding_id in sorted(set(re.findall(r'"(live\.[a-z_]+)"', source))):
        assert f"`{finding_id}`" in guide, finding_id
    assert "reference.md" in guide
