"""What ``spanspec check`` checks: registry files, run configs (their ``telemetry:`` block) and code.

A YAML file is classified by its top-level keys (a registry, a run config, or neither); each is
checked against the main registry, and :func:`check_files` returns every finding at once with a
summary. The command line (:mod:`spanspec.cli.check`) only prints the result.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanspec.files import broken_link, walk
from spanspec.findings import Finding, SpecError, closest, did_you_mean
from spanspec.registry import default_registry_path, installed_registries
from spanspec.spec import Spec

if TYPE_CHECKING:
    from spanspec.registry.loader import Located
    from spanspec.settings import FieldSpec

__all__ = [
    "CONFIG_KEY",
    "CheckResult",
    "LoadedRegistry",
    "check_files",
    "display",
    "program_fields",
    "read_registry",
    "same_file",
]

REGISTRY_KEYS = (
    "version",
    "conventions",
    "groups",
    "presets",
    "attributes",
    "spans",
    "metrics",
)
CONFIG_KEY = "telemetry"
# The program that ships a registry may add settings of its own: a sequence of FieldSpec behind an
# entry point of this group with the name of its registry's entry point.
SETTINGS_ENTRY_POINT_GROUP = "spanspec.settings"


def display(path: str | os.PathLike[str]) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symbolic link loop
        return str(path)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (False when either cannot be resolved)."""
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop
        return False


# -- a registry file ------------------------------------------------------------------------------


@dataclass
class LoadedRegistry:
    """A registry file as loaded: the spec (None when it has violations), its YAML, findings."""

    path: str
    spec: Spec | None = None
    located: Located | None = None
    findings: list[Finding] = field(default_factory=list)


def read_registry(path: str | os.PathLike[str]) -> LoadedRegistry:
    """Load and compile a registry file; its problems become findings, never an exception."""
    from spanspec.registry.compile import compile_registry
    from spanspec.registry.loader import load_registry

    shown = display(path)
    result = LoadedRegistry(shown)
    source = shown if Path(shown).exists() else path
    try:
        registry, located = load_registry(source)
        result.located = located
        result.spec = compile_registry(registry, located)
        # Improvements of a valid registry, where the compiled Spec keeps them.
        result.findings = list(getattr(result.spec, "findings", ()))
    except SpecError as exc:
        result.findings = list(exc.findings)
    return result


# -- which kind of file ---------------------------------------------------------------------------


def classify(path: str) -> str:
    """What a YAML file is, from its top-level keys, without building it.

    Returns ``config`` (a ``telemetry`` key), ``registry`` (a registry section), ``other`` (a
    mapping with neither) or ``broken`` (unreadable, invalid, empty, or not one mapping), read
    with the event parser so a large registry is not built twice.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    stack: list[list[Any]] = []  # [kind, next scalar is a key] per open container
    keys: set[str] = set()
    documents = 0
    try:
        if not Path(path).is_file():  # missing, a folder, a FIFO, /dev/zero: the loader says so
            return "broken"
        text = Path(path).read_text(encoding="utf-8")
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    return "broken"
            elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                if not stack and isinstance(event, yaml.SequenceStartEvent):
                    return "broken"
                if stack and stack[-1][0] == "map":
                    stack[-1][1] = not stack[-1][1]
                stack.append(["map" if isinstance(event, yaml.MappingStartEvent) else "seq", True])
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                stack.pop()
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                if not stack:
                    return "broken"
                if len(stack) == 1 and stack[0][1] and isinstance(event, yaml.ScalarEvent):
                    keys.add(event.value)
                if stack[-1][0] == "map":
                    stack[-1][1] = not stack[-1][1]
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError):
        return "broken"
    if not keys:  # empty, or an empty mapping
        return "broken"
    if CONFIG_KEY in keys:
        return "config"
    if keys & set(REGISTRY_KEYS):
        return "registry"
    return "other"


def either_kind(finding: Finding) -> Finding:
    """A file too broken to tell its kind may have been meant as a run config: say so too."""
    if finding.id not in ("schema.empty", "schema.not_a_mapping"):
        return finding
    hint = f" (or, for a run config, a mapping with a '{CONFIG_KEY}:' block)"
    return replace(finding, message=finding.message + hint)


def other_file(located: Located) -> list[Finding]:
    keys = [str(k) for k in located.data]
    for key in keys:
        close = closest(key, [CONFIG_KEY, *REGISTRY_KEYS], cutoff=0.75)
        if close:
            line, col = located.key_position((key,))
            return [
                Finding(
                    "file.unrecognised",
                    f"top-level key '{key}' is neither a registry section nor '{CONFIG_KEY}' "
                    f"(did you mean '{close}'?)",
                    file=located.path,
                    line=line,
                    col=col,
                )
            ]
    return [
        Finding(
            "config.no_telemetry",
            f"no top-level '{CONFIG_KEY}' block and not a registry: nothing to check",
            level="information",
            file=located.path,
            line=1,
            col=1,
        )
    ]


def program_fields(registry: str | os.PathLike[str]) -> tuple[dict[str, FieldSpec], str]:
    """The settings the program owning ``registry`` adds to spanspec's: the FieldSpecs behind its
    ``spanspec.settings`` entry point (the name of the ``spanspec.registries`` entry point that
    advertises this file). Imports the program's module that holds them; call it only when a
    config names a setting spanspec does not know.

    Returns:
        Name -> FieldSpec (empty when the program declares none), and a note on why they could
        not be loaded (empty when they could).
    """
    from importlib.metadata import entry_points

    from spanspec.settings import FieldSpec

    try:
        wanted = Path(registry).resolve()
    except (OSError, RuntimeError):
        return {}, ""
    names = {r.name for r in installed_registries() if r.path == wanted}
    for ep in entry_points(group=SETTINGS_ENTRY_POINT_GROUP):
        if ep.name not in names:
            continue
        try:
            declared = tuple(ep.load())
        except Exception as exc:  # the program's import failed: say so, check the rest
            return {}, f"{ep.name} = {ep.value!r} could not be loaded ({type(exc).__name__}: {exc})"
        if not all(isinstance(f, FieldSpec) for f in declared):
            return {}, f"{ep.name} = {ep.value!r} is not a sequence of spanspec FieldSpec"
        return {f.name: f for f in declared}, ""
    return {}, ""


def check_config(
    located: Located,
    spec: Spec | None,
    extra: Callable[[], tuple[Mapping[str, FieldSpec], str]] = lambda: ({}, ""),
) -> list[Finding]:
    """Findings for the ``telemetry:`` block of a run config.

    ``extra`` returns the program's own settings (see :func:`program_fields`) and a note on why
    they could not be read; it is called only for a key that is not a spanspec setting.
    """
    from spanspec.settings import FIELDS, shown_value

    fields = {f.name: f for f in FIELDS}
    block = located.data.get(CONFIG_KEY)
    where = (CONFIG_KEY,)
    findings: list[Finding] = []

    def add(id_: str, message: str, pos: tuple[int, int], level: str = "violation") -> None:
        findings.append(Finding(id_, message, level, located.path, pos[0], pos[1]))  # type: ignore[arg-type]

    if block is None:
        return findings
    if not isinstance(block, dict):
        add(
            "config.not_a_mapping",
            f"{CONFIG_KEY}: expected a mapping of settings, got a {type(block).__name__}",
            located.position(where),
        )
        return findings
    for key, value in block.items():
        name = str(key)
        loc = (*where, name)
        spec_field = fields.get(name)
        if spec_field is None:
            own, note = extra()
            spec_field = own.get(name)
        if spec_field is None:
            known = [*fields, *own]
            hint = did_you_mean(name, known)
            valid = "" if hint else f"; expected one of: {', '.join(known)}"
            why = f" (the program's own settings: {note})" if note else ""
            add(
                "config.unknown_key",
                f"{CONFIG_KEY}.{name}: unknown setting{hint}{valid}{why}",
                located.key_position(loc),
            )
            continue
        if value is None:
            continue
        if isinstance(value, str) and "${" in value:
            add(
                "config.interpolated",
                f"{CONFIG_KEY}.{name}={shown_value(name, value, [spec_field])}: an interpolation, resolved only when the config "
                "is loaded; not checked",
                located.position(loc),
                level="information",
            )
            continue
        try:
            spec_field.parse(value)
        except ValueError as exc:
            add(
                "config.invalid_value",
                f"{CONFIG_KEY}.{name}={shown_value(name, value, [spec_field])}: {exc}",
                located.position(loc),
            )
            continue
        if name == "span_groups":
            findings.extend(check_span_groups(located, loc, value, spec))
    return findings


def check_span_groups(
    located: Located, loc: tuple[str, ...], value: Any, spec: Spec | None
) -> list[Finding]:
    if spec is None:
        line, col = located.position(loc)
        return [
            Finding(
                "config.not_checked",
                f"{'.'.join(loc)} not checked: the registry has violations",
                level="information",
                file=located.path,
                line=line,
                col=col,
            )
        ]
    items = (
        [((*loc, i), str(v)) for i, v in enumerate(value)]
        if isinstance(value, list)
        else [(loc, str(value))]
    )
    findings = []
    for item_loc, text in items:
        try:
            spec.resolve(text)
        except SpecError as exc:
            line, col = located.position(item_loc)
            findings.extend(
                Finding(f.id, f"{'.'.join(loc)}: {f.message}", f.level, located.path, line, col)
                for f in exc.findings
            )
    return findings


# -- a whole check --------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """Every finding of one check, and the summary printed with them (``files``, ``registry``...)."""

    findings: list[Finding]
    summary: dict[str, Any]


def check_files(
    paths: Sequence[str],
    registry: str | None = None,
    code: Sequence[str] = (),
    require_used: Sequence[str] = (),
) -> CheckResult:
    """Check YAML files (a folder stands for its ``.yaml`` files) and, with ``code``, span names.

    The main registry is ``registry``, else the first registry among ``paths``, else the default;
    run configs are checked against it, other registries on their own. A folder below a ``code``
    folder that holds a registry of its own is another program's and is left out (see
    :func:`other_programs`).

    Returns:
        Every finding, and the summary.

    Raises:
        RegistryNotFound: when no registry is given or among ``paths`` and none is installed.
    """
    from spanspec.checks.codecheck import check_calls
    from spanspec.checks.codescan import scan_paths
    from spanspec.registry.loader import parse_yaml

    findings: list[Finding] = []
    registries: list[str] = []
    configs: list[Located] = []
    files = yaml_files(paths, findings)
    for file in files:
        kind = classify(file)
        if kind == "registry":
            registries.append(file)
            continue
        if kind == "broken":  # the loader says what is wrong, as it would for a registry
            findings.extend(either_kind(f) for f in read_registry(file).findings)
            continue
        try:
            located = parse_yaml(display(file))
        except SpecError as exc:
            findings.extend(exc.findings)
            continue
        if kind == "config":
            configs.append(located)
        else:
            findings.extend(other_file(located))

    main_path = registry or (registries[0] if registries else default_registry_path())
    main = read_registry(main_path)
    findings.extend(main.findings)
    checked = [main.path]
    for path in registries:
        if same_file(path, main_path):
            continue
        other = read_registry(path)
        findings.extend(other.findings)
        checked.append(other.path)
    extra = functools.cache(lambda: program_fields(main_path))
    for located in configs:
        findings.extend(check_config(located, main.spec, extra))
        checked.append(located.path)

    if code:
        others, notes = other_programs(code, main_path)
        findings.extend(notes)
        scan = scan_paths(code, exclude=others)
        checked.extend(scan.files)
        if main.spec is None:
            findings.extend(scan.findings)
            findings.append(
                Finding(
                    "code.not_checked",
                    "span names in the code were not checked: the registry has violations",
                    level="information",
                    file=main.path,
                    line=1,
                    col=1,
                )
            )
        else:
            findings.extend(
                check_calls(main.spec, scan, located=main.located, require_used=require_used)
            )

    given = [display(f) if Path(f).exists() else f for f in files]
    summary: dict[str, Any] = {
        "registry": main.path,
        "files": list(dict.fromkeys([*given, *checked])),
    }
    if main.spec is not None:
        summary["spans"] = len(main.spec.spans)
    return CheckResult(findings, summary)


def other_programs(
    code: Sequence[str], registry: str | os.PathLike[str]
) -> tuple[list[Path], list[Finding]]:
    """The folders below the ``--code`` folders that hold a registry of their own (not
    ``registry``): another program's code, whose span names that registry declares. They are
    left out of the scan, each with an information finding saying how to check it.

    Returns:
        The folders, and one finding per folder.
    """
    folders: list[Path] = []
    findings: list[Finding] = []
    for given in code:
        root = Path(given)
        if not root.is_dir():
            continue
        for path, problem in walk(root, (".yaml", ".yml")):
            folder = path.parent
            if (
                problem is not None
                or folder == root
                or any(folder.is_relative_to(f) for f in folders)
            ):
                continue
            if classify(str(path)) != "registry" or same_file(path, registry):
                continue
            folders.append(folder)
            findings.append(
                Finding(
                    "code.other_registry",
                    f"not scanned: the folder has its own registry ({display(path)}); check it "
                    f"with `spanspec check {display(path)} --code {display(folder)}`",
                    level="information",
                    file=display(folder),
                )
            )
    return folders, findings


def yaml_files(paths: Sequence[str], findings: list[Finding]) -> list[str]:
    """Files as given; a folder stands for the ``.yaml``/``.yml`` files under it."""
    out: list[str] = []
    for given in paths:
        folder = Path(given)
        if not folder.is_dir() or (folder.is_symlink() and broken_link(folder)):
            out.append(given)
            continue
        found = []
        unreadable = False
        for path, problem in walk(folder, (".yaml", ".yml")):
            if problem is not None:
                findings.append(replace(problem, file=display(str(path))))
                unreadable = True
            elif path.is_file():
                found.append(str(path))
        if not found and not unreadable:
            findings.append(
                Finding(
                    "file.no_yaml",
                    "the folder holds no .yaml or .yml files",
                    level="information",
                    file=display(given),
                )
            )
        out.extend(found)
    return out
