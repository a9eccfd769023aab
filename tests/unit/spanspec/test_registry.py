"""spanspec.registry: where the registry is (SPANSPEC_REGISTRY, else the one an installed package
advertises through the ``spanspec.registries`` entry points), found without importing it."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import spanspec
from spanspec.cli import main
from spanspec.registry import (
    RegistryNotFound,
    default_registry_path,
    installed_registries,
)

REPO = Path(__file__).resolve().parents[3]
RL_REGISTRY = REPO / "schemas" / "span_groups.yaml"


@pytest.fixture
def advertised(monkeypatch):
    """Replace the installed entry points of group spanspec.registries by ``name=value`` pairs."""
    monkeypatch.delenv("SPANSPEC_REGISTRY", raising=False)

    def install(*pairs: tuple[str, str]) -> None:
        eps = importlib.metadata.EntryPoints(
            importlib.metadata.EntryPoint(name, value, "spanspec.registries")
            for name, value in pairs
        )

        def entry_points(**selection):
            return eps.select(**selection)

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    return install


def test_nemo_rl_advertises_its_registry_which_links_to_the_edited_file(monkeypatch):
    monkeypatch.delenv("SPANSPEC_REGISTRY", raising=False)
    (rl,) = [r for r in installed_registries() if r.name == "nemo_rl"]
    assert rl.value == "nemo_rl.telemetry:span_groups.yaml"
    assert rl.path == RL_REGISTRY.resolve() and not rl.problem
    assert default_registry_path() == RL_REGISTRY.resolve()
    assert spanspec.load().source == str(RL_REGISTRY.resolve())


def test_the_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("SPANSPEC_REGISTRY", str(tmp_path / "mine.yaml"))
    assert default_registry_path() == tmp_path / "mine.yaml"


def test_none_installed_says_how_to_give_one(advertised):
    advertised()
    with pytest.raises(RegistryNotFound) as info:
        default_registry_path()
    assert str(info.value).startswith(
        "no registry given: pass a path (--registry PATH) or set SPANSPEC_REGISTRY"
    )
    assert isinstance(info.value, spanspec.SpecError)  # one handler for load()'s callers
    with pytest.raises(spanspec.SpecError, match="no registry given"):
        spanspec.load()


def test_a_broken_entry_point_is_named(advertised):
    advertised(("ghost", "no_such_package.sub:r.yaml"), ("odd", "just_a_module"))
    with pytest.raises(RegistryNotFound) as info:
        default_registry_path()
    message = str(info.value)
    assert "ghost = 'no_such_package.sub:r.yaml': package 'no_such_package' is not installed" in (
        message
    )
    assert "odd = 'just_a_module': expected 'package:file'" in message


def test_several_installed_are_listed_with_how_to_choose(advertised):
    advertised(("nemo_rl", "nemo_rl.telemetry:span_groups.yaml"), ("tests", "tests:missing.yaml"))
    missing = [r for r in installed_registries() if r.path is None]
    assert missing and missing[0].name == "tests"  # tests/ has no missing.yaml: not counted
    advertised(
        ("nemo_rl", "nemo_rl.telemetry:span_groups.yaml"),
        ("spanspec_tests", "tests.unit.spanspec:test_registry.py"),
    )
    with pytest.raises(RegistryNotFound) as info:
        default_registry_path()
    message = str(info.value)
    assert message.startswith("several registries are installed (nemo_rl: ")
    assert "spanspec_tests: " in message
    assert message.endswith("pass one's path (--registry PATH) or set SPANSPEC_REGISTRY")


def test_the_cli_says_it_in_one_line_with_exit_code_2(advertised, capsys):
    advertised()
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("spanspec check: error: no registry given: pass a path (--registry")
    assert main(["check", str(RL_REGISTRY)]) == 0  # a path given needs no discovery
    assert main(["live-check", str(REPO / "missing")]) == 2
