"""The architecture (ARCHITECTURE.md), kept true: every import of spanspec and nemo_rl, read with ast.

The rules, one a line: a module matching ``who`` may not import ``what`` (a module or a package),
unless it also matches ``unless``. Imports inside functions and ``TYPE_CHECKING`` blocks count.
"""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

RULES = [
    # who               may not import         unless                                why
    ("spanspec*", "nemo_rl", "", "spanspec is a library; nemo_rl uses it, never the reverse"),
    ("spanspec*", "torch", "", "spanspec runs without torch"),
    ("spanspec*", "ray", "", "spanspec runs without Ray"),
    ("spanspec*", "opentelemetry.sdk", "spanspec.export*|spanspec.testing", "hot path on the API"),
    ("nemo_rl.models*", "nemo_rl.algorithms", "", "algorithms -> models, never back"),
]
# Importing these loads neither the SDK nor pydantic nor PyYAML (the SDK loads in export.setup,
# pydantic and PyYAML when a registry file is read).
LEAN = ["spanspec", "spanspec.spec", "spanspec.registry", "spanspec.runtime", "spanspec.export"]
HEAVY = ["opentelemetry.sdk", "pydantic", "yaml", "torch", "ray", "nemo_rl"]

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("spanspec", "nemo_rl")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of spanspec and nemo_rl."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, anywhere in the file; ``from a import b`` names ``a.b``
    when that is a module of ours."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _matches(module: str, patterns: str) -> bool:
    return any(p and fnmatch.fnmatchcase(module, p) for p in patterns.split("|"))


@pytest.mark.parametrize("rule", [pytest.param(r, id=f"{r[0]} !-> {r[1]}") for r in RULES])
def test_no_import_breaks_a_rule(rule):
    who, what, unless, why = rule
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if fnmatch.fnmatchcase(module, who) and not _matches(module, unless)
        for target in targets
        if _within(target, what)
    )
    assert not broken, f"{why}:\n  " + "\n  ".join(broken)


def test_spanspec_imports_form_no_circle():
    graph = {
        m: {t for t in ts if t in GRAPH and _within(t, "spanspec") and t != m}
        for m, ts in GRAPH.items()
        if _within(m, "spanspec")
    }
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    circles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                circles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not circles, "imports inside spanspec must point one way:\n  " + "\n  ".join(circles)


def test_each_spanspec_module_imports_alone_in_a_fresh_interpreter():
    names = [m for m in MODULES if _within(m, "spanspec") and not m.endswith("__main__")]
    runs = {
        m: subprocess.Popen(
            [sys.executable, "-c", f"import {m}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in names
    }
    failed = {m: p.communicate(timeout=120)[1].strip().splitlines()[-1:] for m, p in runs.items()}
    failed = {m: err for m, err in failed.items() if runs[m].returncode != 0}
    assert not failed, failed


@pytest.mark.parametrize("module", LEAN)
def test_lean_modules_load_no_sdk_pydantic_or_yaml(module):
    code = f"import sys, {module}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
