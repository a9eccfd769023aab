"""The project as a user installs it: the wheel, not the checkout, in a fresh virtual environment,
used from a folder outside the checkout. Once as ``pip install nemo-rl-otel[rl]`` (no ``otel``
extra: no OpenTelemetry SDK or exporters), once with the extra.

How the fresh venv gets its dependencies: ``python -m venv`` (no system site-packages), the wheel
installed with ``pip install --no-deps`` (a real, non-editable install), and the dependencies
linked one by one from this checkout's own venv into a folder named by a ``.pth`` file. Linking
takes a second where downloading and unpacking torch and Ray would take minutes; leaving out the
links of the ``otel`` extra (``opentelemetry/sdk``, ``opentelemetry/exporter``, ``.../proto``, the
semantic conventions the SDK brings, and their ``.dist-info``) makes an environment in which
``import opentelemetry.sdk`` really fails, exactly as after ``pip install .[rl]``. A
``sitecustomize`` that blocks imports would also hide the SDK, but Ray's workers and agents would
have to inherit it; a folder without the files needs nothing to be inherited.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sysconfig.get_paths()["purelib"])
# What the `otel` extra brings; absent from the no-SDK environment.
OTEL_EXTRA_PARTS = ("sdk", "exporter", "proto", "semconv")
OTEL_EXTRA_DISTS = (
    "opentelemetry_sdk",
    "opentelemetry_exporter",
    "opentelemetry_proto",
    "opentelemetry_semantic_conventions",
)
# This checkout's own install and what the fresh venv already has.
NOT_LINKED = ("nemo_rl", "spanspec", "__editable__", "nemo_rl_otel", "__pycache__")
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
RUN_2_STEPS = [
    "grpo.max_steps=2",
    "grpo.num_prompts_per_step=8",
    "grpo.num_generations_per_prompt=4",
    "grpo.val_at_start=false",
    "grpo.val_period=1000",
    "checkpointing.enabled=false",
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a clean copy of the sources: setuptools reuses a build/ folder, whose stale files
    # (modules since moved or removed) would end up in the wheel.
    source = tmp_path_factory.mktemp("source") / "src"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "dist", "*.egg-info", "runs", "results", "__pycache__"
        ),
    )
    subprocess.run(
        [*PIP_WHEEL, "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (built,) = out.glob("nemo_rl_otel-*.whl")
    return built


def _link_dependencies(deps: Path, with_sdk: bool, present: set[str]) -> None:
    deps.mkdir()
    for entry in SITE.iterdir():
        name = entry.name
        if name.startswith(NOT_LINKED) or name in present or name.endswith(".pth"):
            continue
        if not with_sdk and name.startswith(OTEL_EXTRA_DISTS):
            continue
        if name == "opentelemetry":  # a namespace package: link its parts one by one
            (deps / name).mkdir()
            for part in entry.iterdir():
                if with_sdk or part.name not in OTEL_EXTRA_PARTS:
                    (deps / name / part.name).symlink_to(part)
            continue
        (deps / name).symlink_to(entry)


def _venv(root: Path, wheel: Path, with_sdk: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    present = {p.name for p in site.iterdir()}
    _link_dependencies(root / "deps", with_sdk, present)
    (site / "zz_dependencies.pth").write_text(f"{root / 'deps'}\n")
    return python


def _clean_env() -> dict[str, str]:
    drop = ("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SPANSPEC_", "PYTHONPATH", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _run(python: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), *args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.ray
@pytest.mark.parametrize("with_sdk", [False, True], ids=["rl-only", "rl+otel"])
def test_the_installed_wheel_finds_its_registry_and_trains(tmp_path, wheel, with_sdk):
    python = _venv(tmp_path, wheel, with_sdk)
    spanspec_cli = python.parent / "spanspec"
    away = tmp_path / "elsewhere"  # not the checkout: nothing found by accident
    away.mkdir()

    where = _run(
        python,
        "-c",
        "import json, importlib.util as u, spanspec, nemo_rl, spanspec.registry as c; "
        "print(json.dumps([spanspec.__file__, nemo_rl.__file__, str(c.default_registry_path()), "
        "u.find_spec('opentelemetry.sdk') is not None]))",
        cwd=away,
    )
    assert where.returncode == 0, where.stderr
    spanspec_file, nemo_file, registry, has_sdk = json.loads(where.stdout)
    venv = str(tmp_path / "venv")
    assert spanspec_file.startswith(venv) and nemo_file.startswith(venv)  # the wheel, not ROOT
    assert registry.startswith(venv) and Path(registry).is_file()
    # nemo_rl's registry lives with nemo_rl, found through its entry point; spanspec ships none.
    assert Path(registry).parts[-3:] == ("nemo_rl", "telemetry", "span_groups.yaml")
    assert not (Path(spanspec_file).parent / "data").exists()
    assert has_sdk is with_sdk
    found = _run(
        python,
        "-c",
        "import sys, spanspec.registry as r; r.default_registry_path(); "
        "print(sorted(m for m in ('nemo_rl', 'torch', 'ray') if m in sys.modules))",
        cwd=away,
    )
    assert found.returncode == 0 and found.stdout.strip() == "[]", found.stdout + found.stderr

    check = subprocess.run(
        [str(spanspec_cli), "check"], cwd=away, env=_clean_env(), capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 violation(s)" in check.stdout + check.stderr
    groups = subprocess.run(
        [str(spanspec_cli), "groups", "per_step"],
        cwd=away,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert groups.returncode == 0, groups.stderr
    assert "policy_update" in groups.stdout and "generation" in groups.stdout

    run = _run(
        python,
        str(ROOT / "examples" / "run_grpo.py"),
        *RUN_2_STEPS,
        f"logger.log_dir={tmp_path}/run",
        cwd=away,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) >= 2  # both steps trained
    traces = tmp_path / "run" / "telemetry" / "traces.jsonl"
    hint = "pip install 'nemo-rl-otel[otel]'"
    if with_sdk:
        assert hint not in run.stderr
        names = {
            s["name"]
            for line in traces.read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"]
            for s in ss["spans"]
        }
        assert {"rl.grpo.step", "rl.worker.generate"} <= names
        # The readers find the registry (its conventions: the step span and its number).
        view = subprocess.run(
            [str(spanspec_cli), "view", str(traces), "--step", "1", "--width", "10"],
            cwd=away,
            env=_clean_env(),
            capture_output=True,
            text=True,
        )
        assert view.returncode == 0, view.stdout + view.stderr
        assert view.stdout.splitlines()[1].startswith("rl.grpo.step ")
    else:
        # each process that would export says so once: the driver and the exporting workers
        warnings = [line for line in run.stderr.splitlines() if hint in line]
        assert 1 <= len(warnings) <= 3, run.stderr[-3000:]
        assert any("(PolicyWorker" in w or "(TorchGeneration" in w for w in warnings)
        assert not traces.exists()
