"""Where the registry file is, and :func:`load`: the whole pipeline, schema -> loader -> compile.

Importing this module loads neither pydantic nor PyYAML; :func:`load` does, when it reads a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from spanspec.spec import Spec

__all__ = ["default_registry_path", "load"]


def load(path: str | os.PathLike[str] | None = None) -> Spec:
    """Load and compile a registry file (default: :func:`default_registry_path`).

    Raises:
        SpecError: listing every problem in the file, each with file, line and column.
    """
    from spanspec.registry.compile import compile_registry
    from spanspec.registry.loader import gc_paused, load_registry

    path = default_registry_path() if path is None else path
    with gc_paused():
        registry, located = load_registry(path)
        return compile_registry(registry, located)


def default_registry_path() -> Path:
    """``$SPANSPEC_REGISTRY``, else the registry shipped in the package.

    ``spanspec/data/span_groups.yaml`` is in the wheel; in a checkout it links to
    ``schemas/span_groups.yaml``, the file that is edited, and that is the path reported.
    """
    env = os.environ.get("SPANSPEC_REGISTRY")
    if env:
        return Path(env)
    return (Path(__file__).parent.parent / "data" / "span_groups.yaml").resolve()
