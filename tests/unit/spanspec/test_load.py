"""Bad input: every broken registry or run config is a precise finding, never a traceback.

The fixtures in ``fixtures/bad/`` are checked by the real ``spanspec check`` in one subprocess
(which also shows that one run collects every problem), then each is checked on its own for its
exit code. The expectation table says, for each file, the line and column of the bad value, the
finding id and a part of the message.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import spanspec
from spanspec.cli import main
from spanspec.registry.loader import parse_yaml

HERE = Path(__file__).resolve().parent
BAD = HERE / "fixtures" / "bad"
REPO = HERE.parents[2]
REGISTRY = REPO / "schemas" / "span_groups.yaml"

# file -> [(line, col, id, message part)], every finding the file must produce, in order.
EXPECTED: dict[str, list[tuple[int, int, str, str]]] = {
    "syntax_error.yaml": [
        (
            5,
            4,
            "yaml.syntax",
            "while parsing a block mapping did not find expected key",
        )
    ],
    "unknown_key.yaml": [
        (1, 1, "schema.missing", "groups: required field is missing"),
        (2, 1, "schema.unknown_key", "grups: unknown key (did you mean 'groups'?)"),
    ],
    "unknown_span_key.yaml": [
        (6, 5, "schema.missing", "spans.0.group: required field is missing"),
        (7, 5, "schema.unknown_key", "spans.0.gruop: unknown key (did you mean 'group'?)"),
    ],
    "span_unknown_group.yaml": [
        (
            7,
            12,
            "span.unknown_group",
            "spans[0] 'rl.run': group 'jobs' is not declared (did you mean 'job'?)",
        )
    ],
    "preset_unknown_group.yaml": [
        (
            8,
            18,
            "preset.unknown_member",
            "presets.default: 'stpe' is neither a group nor a preset (did you mean 'step'?)",
        )
    ],
    "preset_self.yaml": [
        (6, 9, "preset.cycle", "presets.loop: presets name each other in a cycle: loop -> loop")
    ],
    "preset_cycle.yaml": [
        (6, 10, "preset.cycle", "first -> second -> first"),
        (7, 11, "preset.cycle", "second -> first -> second"),
    ],
    "duplicate_after_expansion.yaml": [
        (10, 11, "span.duplicate", "spans[1]: span 'rl.ppo.step' is already declared by spans[0]")
    ],
    "attribute_bad_type.yaml": [
        (7, 11, "schema.enum", "attributes.rl.iteration.type: expected 'string', 'int'")
    ],
    "span_undeclared_attribute.yaml": [
        (
            14,
            20,
            "span.unknown_attribute",
            "attribute 'rl.iteraton' is not declared under 'attributes' (did you mean 'rl.iteration'?)",
        )
    ],
    "metric_unknown_span.yaml": [
        (
            15,
            11,
            "metric.unknown_span",
            "span 'rl.{algorithm}.stpe' is not declared (did you mean 'rl.{algorithm}.step'?)",
        )
    ],
    "empty.yaml": [(1, 1, "schema.empty", "the registry file is empty")],
    "not_a_mapping.yaml": [
        (1, 1, "schema.not_a_mapping", "the registry must be a mapping of sections, got a list")
    ],
    "duplicate_key.yaml": [
        (
            5,
            3,
            "yaml.duplicate_key",
            "key 'job' appears twice in the same mapping (the first is at line 3)",
        )
    ],
    "missing_field.yaml": [(6, 5, "schema.missing", "spans.0.brief: required field is missing")],
    "wrong_value_type.yaml": [
        (1, 10, "schema.int_type", "version: expected 1 (the only registry format version)")
    ],
    "not_utf8.yaml": [(4, 22, "file.unreadable", "not UTF-8 text (byte 0xe9)")],
    "too_deep.yaml": [(2, 1007, "yaml.syntax", "exceeded maximum nesting depth")],
    "bad_config.yaml": [
        (
            6,
            3,
            "config.unknown_key",
            "telemetry.span_grups: unknown setting (did you mean 'span_groups'?)",
        ),
        (7, 13, "config.invalid_value", "telemetry.exporter='otpl': expected one of auto, otlp"),
        (
            8,
            16,
            "groups.unknown",
            "telemetry.span_groups: unknown group or preset 'genration' (did you mean 'generation'?); valid presets: all, default, per_step",
        ),
    ],
}


def spanspec_command() -> list[str]:
    script = Path(sys.executable).with_name("spanspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "spanspec.cli"]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPANSPEC_", "NEMO_RL_OTEL_"))}


@pytest.fixture(scope="module")
def checked() -> tuple[subprocess.CompletedProcess[str], dict[str, list[dict]]]:
    files = [str(BAD / name) for name in EXPECTED]
    done = subprocess.run(
        [*spanspec_command(), "check", "--registry", str(REGISTRY), "--format", "json", *files],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=REPO,
    )
    body = json.loads(done.stdout)
    by_file: dict[str, list[dict]] = {}
    for f in body["findings"]:
        by_file.setdefault(Path(f["file"]).name, []).append(f)
    return done, by_file


def test_one_run_reports_every_file_and_exits_1_without_a_traceback(checked):
    done, by_file = checked
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert set(by_file) == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_bad_input_is_a_precise_finding(checked, name):
    _, by_file = checked
    got = [(f["line"], f["col"], f["id"], f["message"]) for f in by_file[name]]
    assert len(got) == len(EXPECTED[name]), got
    for (line, col, id_, message), want in zip(got, EXPECTED[name], strict=True):
        assert (line, col, id_) == want[:3], (name, message)
        assert want[3] in message, (name, message)
    assert {f["level"] for f in by_file[name]} == {"violation"}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_bad_input_alone_exits_1(name, capsys, monkeypatch):
    monkeypatch.delenv("SPANSPEC_REGISTRY", raising=False)
    assert main(["check", str(BAD / name)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and f"{name}:{EXPECTED[name][0][0]}:" in out


def test_text_output_is_one_line_per_finding(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert main(["check", "tests/unit/spanspec/fixtures/bad/unknown_key.yaml"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "tests/unit/spanspec/fixtures/bad/unknown_key.yaml:1:1: violation: schema.missing: groups: required field is missing",
        "tests/unit/spanspec/fixtures/bad/unknown_key.yaml:2:1: violation: schema.unknown_key: grups: unknown key (did you mean 'groups'?)",
        "spanspec check: 2 violation(s), 0 improvement(s), 0 information",
    ]


def test_a_missing_file_and_an_empty_folder_are_findings(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "nope.yaml"), str(tmp_path / "empty")]) == 1
    out = capsys.readouterr().out
    assert "nope.yaml:0:0: violation: file.unreadable: cannot read file: No such file" in out
    assert "information: file.no_yaml: the folder holds no .yaml or .yml files" in out


def test_a_folder_stands_for_its_yaml_files(tmp_path, capsys):
    (tmp_path / "configs" / "nested").mkdir(parents=True)
    (tmp_path / "configs" / "a.yaml").write_text("telemetry: {exporter: otpl}\n")
    (tmp_path / "configs" / "nested" / "b.yml").write_text("telemetry: {span_groups: stpe}\n")
    (tmp_path / "configs" / "c.yaml").write_text("telemetry: {file_dir: '${logger.log_dir}/t'}\n")
    assert main(["check", str(tmp_path / "configs")]) == 1
    out = capsys.readouterr().out
    assert "a.yaml:1:23: violation: config.invalid_value" in out
    assert "b.yml:1:26: violation: groups.unknown" in out
    assert "c.yaml:1:23: information: config.interpolated" in out


def test_the_library_raises_spec_error_with_the_same_findings():
    with pytest.raises(spanspec.SpecError) as info:
        spanspec.load(BAD / "unknown_key.yaml")
    assert [f.id for f in info.value.findings] == ["schema.missing", "schema.unknown_key"]


def test_positions_point_at_values_and_keys():
    located = parse_yaml(BAD / "span_unknown_group.yaml")
    assert located.position(("spans", 0, "group")) == (7, 12)
    assert located.key_position(("spans", 0, "group")) == (7, 5)
    assert located.position(("spans", 0, "nope")) == (6, 5)  # the mapping that lacks it


def huge_registry(path: Path, spans: int = 10_000) -> Path:
    lines = [
        "version: 1",
        "groups:",
        "  step: {description: One step.}",
        "attributes:",
        "  rl.iteration: {type: int, brief: Step index.}",
        "spans:",
    ]
    for i in range(spans):
        lines += [
            f"  - name: rl.phase_{i}",
            "    group: step",
            f"    brief: Phase number {i}.",
            "    attributes: {rl.iteration: required}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_huge_registry_loads(tmp_path):
    """10,000 spans load whole (its time is measured by bench/bench_spanspec.py, not here)."""
    spec = spanspec.load(huge_registry(tmp_path / "huge.yaml"))
    assert len(spec.spans) == 10_000
    assert spec.spans["rl.phase_9999"].group == "step"
    assert spec.enabled_spans("step") == frozenset(spec.spans)


@pytest.mark.parametrize("name", ["huge.yaml", "broken.yaml"])
def test_loading_pauses_and_restores_the_garbage_collector(tmp_path, name):
    """Loading pauses the cyclic collector for speed and gives it back, also on an error."""
    path = huge_registry(tmp_path / name, 2_000)
    if name == "broken.yaml":
        path.write_text(path.read_text().replace("group: step", "group: stpe", 1))
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        spanspec.load(path)
    except spanspec.SpecError:
        assert name == "broken.yaml"
    finally:
        gc.callbacks.remove(count)
    # At most the one collection due when the collector is given back (hundreds without the pause).
    assert len(collections) <= 1, collections
    assert gc.isenabled()
    gc.disable()
    try:
        spanspec.load(huge_registry(tmp_path / "again.yaml", 10))
        assert not gc.isenabled()  # a caller's paused collector stays paused
    finally:
        gc.enable()


def test_a_huge_registry_with_an_error_still_points_at_it(tmp_path):
    path = huge_registry(tmp_path / "huge.yaml", 2_000)
    text = path.read_text().replace(
        "  - name: rl.phase_1500\n    group: step", "  - name: rl.phase_1500\n    group: stpe"
    )
    path.write_text(text)
    with pytest.raises(spanspec.SpecError) as info:
        spanspec.load(path)
    (f,) = info.value.findings
    assert (f.id, f.line) == ("span.unknown_group", 6 + 1500 * 4 + 2)
