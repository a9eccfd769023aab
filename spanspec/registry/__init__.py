"""Where the registry file is, and :func:`load`: the whole pipeline, schema -> loader -> compile.

A program ships its registry inside its own package and advertises it with a package entry point
in the group ``spanspec.registries``, whose value names the package and the file in it::

    [project.entry-points."spanspec.registries"]
    myapp = "myapp.telemetry:span_groups.yaml"

:func:`default_registry_path` is ``$SPANSPEC_REGISTRY``, else the one installed registry. Finding
it imports nothing of the program (its package folder is looked up, not imported), so
``spanspec check`` stays lean. Importing this module loads neither pydantic nor PyYAML;
:func:`load` does, when it reads a file.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from spanspec.findings import Finding, SpecError
from spanspec.spec import Spec

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENV_VAR",
    "InstalledRegistry",
    "RegistryNotFound",
    "default_registry_path",
    "installed_registries",
    "load",
]

ENV_VAR = "SPANSPEC_REGISTRY"
ENTRY_POINT_GROUP = "spanspec.registries"


class RegistryNotFound(SpecError):
    """No registry was given and none (or more than one) is installed: one line saying how to
    choose. A :class:`~spanspec.findings.SpecError`, so callers of :func:`load` need one handler."""

    def __init__(self, message: str) -> None:
        super().__init__([Finding("registry.not_found", message, file=f"${ENV_VAR}")])
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class InstalledRegistry:
    """A registry an installed package advertises: the entry point's name, its value and the file
    it names (None when the package or the file cannot be found)."""

    name: str
    value: str
    path: Path | None
    problem: str = ""


def load(path: str | os.PathLike[str] | None = None) -> Spec:
    """Load and compile a registry file (default: :func:`default_registry_path`).

    Returns:
        The compiled, frozen :class:`~spanspec.spec.Spec`.

    Raises:
        SpecError: listing every problem in the file, each with file, line and column;
            :class:`RegistryNotFound` when no path is given and none can be found.
    """
    from spanspec.registry.compile import compile_registry
    from spanspec.registry.loader import gc_paused, load_registry

    path = default_registry_path() if path is None else path
    with gc_paused():
        registry, located = load_registry(path)
        return compile_registry(registry, located)


def installed_registries() -> list[InstalledRegistry]:
    """The registries installed packages advertise (entry point group ``spanspec.registries``),
    by name; nothing is imported.

    Returns:
        One :class:`InstalledRegistry` per entry point, sorted by name.
    """
    from importlib.metadata import entry_points

    found: dict[str, InstalledRegistry] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in found:  # the first distribution on sys.path wins, as for imports
            path, problem = _locate(ep.value)
            found[ep.name] = InstalledRegistry(ep.name, ep.value, path, problem)
    return [found[name] for name in sorted(found)]


def _locate(value: str) -> tuple[Path | None, str]:
    """``package.sub:file.yaml`` -> the file in that package's folder, without importing it."""
    module, sep, file = value.partition(":")
    module, file = module.strip(), file.strip()
    if not sep or not module or not file:
        return None, f"expected 'package:file', got {value!r}"
    top, *below = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or ()) if spec else []
    if not folders:
        return None, f"package '{top}' is not installed"
    for folder in folders:
        candidate = Path(folder, *below, file)
        if candidate.is_file():
            return candidate.resolve(), ""
    return None, f"{Path(folders[0], *below, file)}: no such file"


def default_registry_path() -> Path:
    """``$SPANSPEC_REGISTRY``, else the one registry an installed package advertises.

    In a checkout the installed file may be a link to the one that is edited; the path returned
    is the link's target, so messages name the file a person edits.

    Returns:
        The registry's path (not checked for existence when it comes from ``$SPANSPEC_REGISTRY``).

    Raises:
        RegistryNotFound: when the variable is unset and no package, or several, advertise one
            (the message names them and says how to choose).
    """
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env)
    installed = installed_registries()
    usable = [r for r in installed if r.path is not None]
    if len(usable) == 1:
        return usable[0].path  # type: ignore[return-value]
    if len(usable) > 1:
        listed = "; ".join(f"{r.name}: {r.path}" for r in usable)
        raise RegistryNotFound(
            f"several registries are installed ({listed}): pass one's path (--registry PATH) "
            f"or set {ENV_VAR}"
        )
    broken = "".join(f" ({r.name} = {r.value!r}: {r.problem})" for r in installed)
    raise RegistryNotFound(
        f"no registry given: pass a path (--registry PATH) or set {ENV_VAR}; no installed "
        f"package advertises one in the '{ENTRY_POINT_GROUP}' entry points{broken}"
    )
