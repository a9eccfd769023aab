"""Every command of the user guide runs, as written, and exits 0.

The commands are the lines of the guide's ```bash blocks (a ``\\`` continues a line) and the
``$ ``-lines of its ```console blocks. They run page by page, in order, in one scratch folder that
links to the repository (so ``runs/`` written by one page is read by the next), with the
project's venv first on PATH and no telemetry variables from outside. A command already run is
not run again. A block whose first line is ``# docs-test: skip (...)`` is left out; the comment
says which test runs those commands instead. The benchmarks (``python bench/...``, minutes each)
are run small by their own tests (tests/functional/test_scale.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import spanspec

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "observability"
PAGES = [
    GUIDE / "README.md",
    GUIDE / "reading_a_run.md",
    GUIDE / "reading_an_async_run.md",
    GUIDE / "configuration.md",
    GUIDE / "backends.md",
    GUIDE / "scale.md",
    GUIDE / "watchdog.md",
    GUIDE / "ranks_memory_flops.md",
    GUIDE / "vllm.md",
    GUIDE / "trl.md",
    GUIDE / "extending.md",
    GUIDE / "instrumenting.md",
    GUIDE / "troubleshooting.md",
    GUIDE / "nemo-lens.md",
    ROOT / "nemo_rl" / "telemetry" / "README.md",
]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def commands(page: Path) -> list[str]:
    """The commands of one page, in order."""
    out = []
    for language, body in FENCE.findall(page.read_text(encoding="utf-8")):
        if language == "bash":
            if body.lstrip().startswith("# docs-test: skip"):
                continue
            text = body.replace("\\\n", " ")
            out += [line.strip() for line in text.splitlines()]
        elif language == "console":
            out += [line[2:].strip() for line in body.splitlines() if line.startswith("$ ")]
    return [c for c in out if c and not c.startswith(("#", "python bench/"))]


def ours_column_names(page: Path) -> list[str]:
    """The backticked ``rl.*`` / ``gen_ai.*`` names in the "ours" column of every table of a page."""
    names: list[str] = []
    column = None
    for line in page.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("ours") if "ours" in cells else -1
        elif column >= 0 and not set(cells[0]) <= set("-: "):
            names += re.findall(r"`((?:rl|gen_ai)\.[\w.]+)`", cells[column])
    return names


def test_the_nemo_lens_page_names_only_what_we_emit():
    """Every name of ours that the nemo-lens page maps to is declared in the registry, or is a
    resource attribute the telemetry lifecycle writes."""
    spec = spanspec.load()
    declared = set(spec.spans) | set(spec.metrics) | set(spec.attributes)
    lifecycle = (ROOT / "nemo_rl" / "telemetry" / "lifecycle.py").read_text(encoding="utf-8")
    names = ours_column_names(GUIDE / "nemo-lens.md")
    assert len(names) > 40
    unknown = [n for n in names if n not in declared and f'"{n}"' not in lifecycle]
    assert not unknown, f"docs/observability/nemo-lens.md names what we do not emit: {unknown}"


def test_the_guide_names_its_pages_and_has_commands():
    assert {p.name for p in GUIDE.glob("*.md")} - {"reference.md"} <= {p.name for p in PAGES}
    assert all(commands(p) for p in PAGES if p.name not in ("reference.md", "scale.md")), [
        p.name for p in PAGES if not commands(p)
    ]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guide")
    for entry in ROOT.iterdir():
        if entry.name in ("runs", "docs", ".git"):
            continue
        (folder / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "docs", folder / "docs")  # `spanspec docs --out` writes here
    return folder


def test_every_command_of_the_guide_runs(scratch):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS", "SPANSPEC_"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    seen: set[str] = set()
    ran = []
    for page in PAGES:
        for command in commands(page):
            if command in seen:
                continue
            seen.add(command)
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=400,
            )
            where = f"{page.relative_to(ROOT)}: {command}"
            assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr, where
            ran.append(command)
    assert (scratch / "runs" / "guide" / "report.html").stat().st_size > 10_000
    assert (scratch / "runs" / "guide" / "trace.json").stat().st_size > 1_000
    assert (scratch / "docs" / "observability" / "reference.md").read_text() == (
        GUIDE / "reference.md"
    ).read_text()
    assert len(ran) >= 10
