"""The architecture (ARCHITECTURE.md), kept true: every import of spanspec and nemo_rl, read with ast.

spanspec is drawn as layers, top to bottom (:data:`LAYERS`). A module may import a module of its
own layer or of a layer below; an import of a higher layer fails, and so does one between the
packages of a layer that must not know each other (``checks`` and ``traces``: a static check
never reads traces, a trace reader never scans code). Every module of spanspec must be in
exactly one layer, so a new one is placed on purpose.

Beside the layers, :data:`RULES` bans: a module matching ``who`` may not import ``what`` (a
module or a package) unless the module matches ``unless`` or the imported one ``but``. Imports
inside functions and ``TYPE_CHECKING`` blocks count.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

# spanspec, top to bottom: (name, its packages or modules, whether they must not know each other).
# A name ending in ".*" is the package and everything in it.
LAYERS: list[tuple[str, tuple[str, ...], bool]] = [
    ("command line", ("spanspec.cli.*",), False),
    ("static checks | trace readers", ("spanspec.checks.*", "spanspec.traces.*"), True),
    ("export | test helpers", ("spanspec.export.*", "spanspec.testing"), True),
    ("the package's face", ("spanspec",), False),
    ("registry pipeline", ("spanspec.registry.*",), False),
    (
        "hot path",
        (
            "spanspec.runtime",
            "spanspec.metrics",
            "spanspec.settings",
            "spanspec.propagate",
            "spanspec.watchdog",
            "spanspec._coerce",
            "spanspec.sdk_env",
            "spanspec.skew",
            "spanspec.usage",
        ),
        False,
    ),
    ("compiled model | files", ("spanspec.spec", "spanspec.files"), True),
    ("leaf", ("spanspec.findings", "spanspec._redact", "spanspec._text"), False),
]
# The most modules spanspec/ may hold at its top level (the rest live in packages by audience).
MAX_TOP_LEVEL_MODULES = 16

RULES = [
    # who               may not import        unless (who)   but (what)   why
    ("spanspec*", "nemo_rl", "", "", "spanspec is a library; nemo_rl uses it, never the reverse"),
    ("spanspec*", "torch", "", "", "spanspec runs without torch"),
    ("spanspec*", "ray", "", "", "spanspec runs without Ray"),
    (
        "spanspec*",
        "opentelemetry.sdk",
        "spanspec.export*|spanspec.testing",
        "",
        "the hot path and every tool run on the OpenTelemetry API alone",
    ),
    ("nemo_rl.models*", "nemo_rl.algorithms", "", "", "algorithms -> models, never back"),
    ("nemo_rl.distributed*", "nemo_rl.models", "", "", "models -> distributed, never back"),
    ("nemo_rl.distributed*", "nemo_rl.algorithms", "", "", "algorithms -> distributed, never back"),
    ("nemo_rl.utils*", "nemo_rl", "", "nemo_rl.utils*", "nemo_rl.utils is the leaf of nemo_rl"),
]
# Rules the code does not keep yet, each with why (xfail, not strict: fixed elsewhere soon).
NOT_YET: dict[str, str] = {}
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


def _in(module: str, entry: str) -> bool:
    """Whether ``module`` is the layer entry ``entry`` (``pkg.*``: the package or inside it)."""
    return _within(module, entry[:-2]) if entry.endswith(".*") else module == entry


def _place(module: str) -> tuple[int, str] | None:
    """``(layer index from the top, entry)`` of a spanspec module, or None when in no layer."""
    for index, (_, entries, _) in enumerate(LAYERS):
        for entry in entries:
            if _in(module, entry):
                return index, entry
    return None


def _spanspec_modules() -> list[str]:
    return [m for m in MODULES if _within(m, "spanspec")]


def test_every_spanspec_module_is_in_exactly_one_layer():
    unplaced = [m for m in _spanspec_modules() if _place(m) is None]
    twice = [
        m
        for m in _spanspec_modules()
        if sum(_in(m, e) for _, entries, _ in LAYERS for e in entries) > 1
    ]
    assert not unplaced, "add these modules to a layer of LAYERS (and ARCHITECTURE.md):\n  " + (
        "\n  ".join(unplaced)
    )
    assert not twice, f"in two layers: {twice}"


def _against_the_order() -> list[str]:
    broken = []
    for module in _spanspec_modules():
        here = _place(module)
        if here is None:
            continue
        for target in sorted(GRAPH[module]):
            there = _place(target) if _within(target, "spanspec") and target in MODULES else None
            if there is None or target == module:
                continue
            (layer, entry), (target_layer, target_entry) = here, there
            name = LAYERS[target_layer][0]
            if target_layer < layer:
                broken.append(
                    f"{module} imports {target}: layer '{name}' is above '{LAYERS[layer][0]}'"
                )
            elif target_layer == layer and LAYERS[layer][2] and entry != target_entry:
                broken.append(
                    f"{module} imports {target}: {entry} and {target_entry} share the layer "
                    f"'{name}' and must not know each other"
                )
    return broken


def test_spanspec_imports_follow_the_drawn_order():
    broken = _against_the_order()
    assert not broken, "imports against the order of LAYERS (ARCHITECTURE.md):\n  " + (
        "\n  ".join(broken)
    )


def test_spanspec_keeps_few_modules_at_its_top_level():
    top = sorted(p.name for p in (ROOT / "spanspec").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top)} modules at the top of spanspec/ (at most {MAX_TOP_LEVEL_MODULES}): put the "
        f"new one in the package of its audience: {', '.join(top)}"
    )


def _rule_params() -> list[object]:
    params = []
    for rule in RULES:
        rule_id = f"{rule[0]} !-> {rule[1]}"
        marks = (
            [pytest.mark.xfail(reason=NOT_YET[rule_id], strict=False)] if rule_id in NOT_YET else []
        )
        params.append(pytest.param(rule, id=rule_id, marks=marks))
    return params


@pytest.mark.parametrize("rule", _rule_params())
def test_no_import_breaks_a_rule(rule):
    who, what, unless, but, why = rule
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if fnmatch.fnmatchcase(module, who) and not _matches(module, unless)
        for target in targets
        if _within(target, what) and not _matches(target, but)
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


def test_finding_the_installed_registry_imports_no_program():
    code = (
        "import sys, spanspec.registry as r; r.installed_registries(); "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_spanspec_names_no_application():
    # What a program calls things comes from its registry's conventions, never from spanspec.
    words = re.compile(r"(?<![A-Za-z])rl\.|(?i:nemo|vllm|lens)")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "spanspec").rglob("*"))
        if path.suffix in (".py", ".html", ".yaml", ".json")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if words.search(line)
    ]
    assert not found, "an application's words in spanspec:\n  " + "\n  ".join(found)
