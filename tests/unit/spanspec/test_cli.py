"""The ``spanspec`` command line, run as a subprocess the way a user or CI runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import spanspec
from spanspec import cli
from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

REPO = Path(__file__).resolve().parents[3]


def run(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("spanspec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spanspec.cli"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPANSPEC_", "NEMO_RL_OTEL_"))}
    done = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**base, "PYTHONIOENCODING": "utf-8", **(env or {})},
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def test_help_and_usage_errors():
    assert run("--help").returncode == 0
    done = run()
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "the following arguments are required: COMMAND" in done.stderr
    done = run("chek")
    assert done.returncode == 2 and "invalid choice: 'chek'" in done.stderr
    done = run("view", "x.jsonl", "--width", "0")
    assert done.returncode == 2 and "expected a number >= 1" in done.stderr


def test_the_repository_passes_its_own_check():
    done = run("check", "schemas/span_groups.yaml", "--code", "spanspec")
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1].startswith("spanspec check: 0 violation(s)")
    done = run("check", "--code", "spanspec", "--code", "nemo_rl", "--level", "violation")
    assert done.returncode == 0, done.stdout


def test_check_code_json_and_require_used(tmp_path):
    source = tmp_path / "train.py"
    source.write_text(
        "import spanspec\n"
        "with spanspec.span('rl.grpo.step', **{'rl.iteration': 0}):\n"
        "    with spanspec.span('rl.grpo.rollout_x'):\n"
        "        pass\n"
    )
    done = run("check", "--code", str(source), "--require-used", "rl.grpo.*", "--format", "json")
    assert done.returncode == 1
    body = json.loads(done.stdout)
    violations = [f for f in body["findings"] if f["level"] == "violation"]
    undeclared = [f for f in violations if f["id"] == "code.undeclared_span"]
    assert [(f["line"], f["col"]) for f in undeclared] == [(3, 24)]
    assert "did you mean 'rl.grpo.rollout'?" in undeclared[0]["message"]
    assert any(f["id"] == "code.unused_span" for f in violations)
    assert body["summary"]["ok"] is False and body["summary"]["violations"] == len(violations)
    assert str(source) in body["summary"]["files"]
    assert set(body["findings"][0]) == {"id", "message", "level", "file", "line", "col"}
    done = run("check", "--require-used", "rl.*")
    assert done.returncode == 2 and "--require-used needs --code DIR" in done.stderr


def test_check_a_run_config(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "policy: {model: tiny}\ntelemetry:\n  span_groups: [per_step, -generation]\n  exporter: file\n"
    )
    assert run("check", str(good)).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("telemetry:\n  span_groups:\n    - per_step\n    - rolout\n")
    done = run("check", str(bad))
    assert done.returncode == 1
    assert (
        f"{bad}:4:7: violation: groups.unknown: telemetry.span_groups: unknown group or preset 'rolout' (did you mean 'rollout'?)"
        in done.stdout
    )
    other = tmp_path / "other.yaml"
    other.write_text("telemetri:\n  enabled: true\n")
    done = run("check", str(other))
    assert done.returncode == 1 and "did you mean 'telemetry'?" in done.stdout
    plain = tmp_path / "plain.yaml"
    plain.write_text("policy: {model: tiny}\n")
    done = run("check", str(plain))
    assert done.returncode == 0 and "information: config.no_telemetry" in done.stdout


def test_a_broken_registry_skips_the_dependent_checks(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("telemetry: {span_groups: per_step}\n")
    registry = REPO / "tests/unit/spanspec/fixtures/bad/unknown_key.yaml"
    done = run("check", str(config), "--registry", str(registry), "--code", "spanspec")
    assert done.returncode == 1
    assert "config.not_checked" in done.stdout and "code.not_checked" in done.stdout


def test_groups():
    done = run("groups", "per_step,-generation")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "'per_step,-generation': 15 of 19 groups, 68 of 97 spans enabled"
    assert any(line.split() == ["step", "-", "preset", "per_step", "7"] for line in lines)
    assert "disabled groups: job, generation, load_checkpoint, model_init" in lines
    assert any(
        line.split() == ["rl.grpo.rollout", "rollout", "(preset", "per_step)"] for line in lines
    )
    body = json.loads(run("groups", "all,rollout", "--format", "json").stdout)
    assert body["groups"]["job"]["via"] == "preset default"
    assert body["groups"]["rollout"]["via"] == "preset per_step"
    assert body["spans"]["rl.ppo.value_update"] == "value_update"
    assert body["disabled"] == []
    done = run("groups", "per_stp")
    assert done.returncode == 1
    assert (
        "groups.unknown: unknown group or preset 'per_stp' (did you mean 'per_step'?)"
        in done.stdout
    )


def test_docs_and_schema_are_fresh_and_regenerate(tmp_path):
    code = ("--code", "nemo_rl", "--code", "examples")
    done = run("docs", "--out", "docs/observability", *code, "--check")
    assert done.returncode == 0, done.stdout
    done = run("schema", "--out", "schemas/span_groups.schema.json", "--check")
    assert done.returncode == 0, done.stdout
    done = run("docs", "--out", str(tmp_path), *code)
    assert done.returncode == 0
    assert (tmp_path / "reference.md").read_text() == (
        REPO / "docs/observability/reference.md"
    ).read_text()
    (tmp_path / "reference.md").write_text("stale\n")
    done = run("docs", "--out", str(tmp_path), "--check")
    assert done.returncode == 1 and "violation: docs.stale:" in done.stdout
    assert json.loads(run("schema").stdout)["title"] == "spanspec registry"


def test_live_check_and_view_on_a_real_trace_file(tmp_path):
    path = write_traces(tmp_path, grpo_steps(3), groups="per_step", spec=spanspec.load())
    done = run("live-check", str(tmp_path))
    assert done.returncode == 0, done.stdout
    assert "coverage (24 spans checked in 1 file(s)):" in done.stdout
    # coverage once, as the table, not again as a finding per group
    assert "live.coverage" not in done.stdout
    assert re.search(r"^step +on +1 +1 +3$", done.stdout, re.M), done.stdout
    done = run("live-check", str(path), "--groups", "default", "--format", "json")
    assert done.returncode == 1
    body = json.loads(done.stdout)
    off = [f for f in body["findings"] if f["id"] == "live.group_off"]
    assert off and "(seen 3 times)" in off[0]["message"]
    assert body["summary"]["groups_source"] == "--groups default"
    done = run("live-check", str(path), "--groups", "per_stepp")
    assert done.returncode == 2 and "did you mean 'per_step'?" in done.stderr
    done = run("live-check", str(path), "--require-coverage", "generatoin")
    assert done.returncode == 2 and "did you mean 'generation'?" in done.stderr

    done = run("view", str(path), "--step", "2")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("trace ") and "rl.grpo.step" in lines[0]
    assert lines[1].startswith("rl.grpo.step ") and "█" in lines[1]
    assert lines[5].startswith("      rl.worker.generate ")
    done = run("view", str(path), "--list")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
    done = run("view", str(path), "--step", "9")
    assert done.returncode == 1 and "steps in the files: 0, 1, 2" in done.stderr
    done = run("view", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 1 and "file.unreadable" in done.stderr


def test_live_check_of_a_truncated_file_is_not_an_error(tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), spec=spanspec.load())
    path.write_text(path.read_text() + '{"resourceSpans": [{"scopeSp')
    done = run("live-check", str(path), "--level", "improvement")
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == (
        "spanspec live-check: 0 violation(s), 0 improvement(s), 1 information "
        "(1 below --level improvement not shown)"
    )


def test_an_internal_error_is_one_line(monkeypatch, capsys):
    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(cli.groups, "run", broken)
    monkeypatch.delenv("SPANSPEC_DEBUG", raising=False)
    assert cli.main(["groups", "all"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError: 'boom'" in err


@pytest.mark.parametrize("argv", [["--version"], ["check", "--help"]])
def test_help_and_version_return_0(argv, capsys):
    assert cli.main(argv) == 0


def test_a_config_too_broken_to_classify_says_both_kinds(tmp_path):
    (tmp_path / "empty_run.yaml").write_text("")
    (tmp_path / "list_run.yaml").write_text("- telemetry\n")
    done = run("check", "schemas/span_groups.yaml", str(tmp_path))
    assert done.returncode == 1
    lines = sorted(line for line in done.stdout.splitlines() if "_run.yaml" in line)
    assert [line.split(": ")[2] for line in lines] == ["schema.empty", "schema.not_a_mapping"]
    assert all(
        line.startswith(str(tmp_path))
        and ":1:1: violation: " in line
        and line.endswith("(or, for a run config, a mapping with a 'telemetry:' block)")
        for line in lines
    ), lines


def test_a_run_config_may_hold_the_programs_own_settings(tmp_path):
    # nemo_rl adds vllm_native_tracing (its spanspec.settings entry point, loaded only for a key
    # spanspec does not know); checked with its parser, and a near miss still gets a hint.
    config = tmp_path / "run.yaml"
    config.write_text("telemetry:\n  vllm_native_tracing: true\n  span_groups: per_step\n")
    done = run("check", "schemas/span_groups.yaml", str(config))
    assert done.returncode == 0, done.stdout
    config.write_text("telemetry:\n  vllm_native_tracing: maybe\n  vllm_native_tracin: true\n")
    done = run("check", "schemas/span_groups.yaml", str(config))
    assert done.returncode == 1
    assert "telemetry.vllm_native_tracing='maybe': expected a boolean" in done.stdout
    assert (
        "telemetry.vllm_native_tracin: unknown setting (did you mean 'vllm_native_tracing'?)"
        in (done.stdout)
    )
    # A registry no installed program advertises: the key is not a setting there.
    other = tmp_path / "other.yaml"
    other.write_text("version: 1\ngroups:\n  g: {description: x}\n")
    config.write_text("telemetry:\n  vllm_native_tracing: true\n")
    done = run("check", str(other), str(config))
    assert done.returncode == 1 and "telemetry.vllm_native_tracing: unknown setting" in done.stdout


def test_view_takes_the_registry_whose_conventions_it_reads(tmp_path):
    path = write_traces(tmp_path, grpo_steps(2), groups="per_step", spec=spanspec.load())
    done = run("view", str(path), "--step", "1", "--registry", "schemas/span_groups.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split("  ")[1] == "rl.grpo.step (rl.iteration=1)"
    # A registry without conventions: no step to pick by number, said in one line.
    plain = tmp_path / "plain.yaml"
    plain.write_text("version: 1\ngroups:\n  g: {description: x}\n")
    done = run("view", str(path), "--step", "1", "--registry", str(plain))
    assert done.returncode == 1 and "names no step span" in done.stderr
    done = run("view", str(path), "--run-id", "x", "--registry", str(plain))
    assert done.returncode == 2 and "names no run attribute (conventions.run_attribute)" in (
        done.stderr
    )
    done = run("view", str(path), "--registry", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "missing.yaml:0:0: violation: file.unreadable: cannot read file" in done.stderr
