"""Run configs: a YAML file, dotted overrides from the command line, then pydantic validation.

    cfg = load_config("examples/configs/grpo_tiny.yaml", ["grpo.max_steps=20"], MasterConfig)

Errors name the full key and offer the closest valid one:
``grpo.max_stepz: unknown key (did you mean 'max_steps'?)``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from spanspec.findings import Finding, SpecError, as_yaml, did_you_mean, validation_message
from spanspec.registry.loader import parse_yaml

__all__ = ["ConfigError", "load_config", "read_config", "validate_config"]

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config that cannot be used; ``problems`` lists one ``key: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(f"invalid config: {problems[0]}")
        else:
            super().__init__("invalid config:\n  " + "\n  ".join(problems))


def load_config(path: str | None, overrides: Sequence[str], model: type[M]) -> M:
    """Returns ``model`` validated from the YAML at ``path`` (None: defaults) with ``overrides``.

    Each override is ``dotted.key=value`` (values parsed as YAML: ``20``, ``true``, ``[a, b]``).
    Raises ``ConfigError`` for a malformed override or any invalid or unknown key.
    """
    return validate_config(read_config(path, overrides), model)


def read_config(path: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    """Returns the YAML at ``path`` (None: empty) merged with ``overrides``, interpolations resolved.

    Raises ``ConfigError`` naming the file:line:col, the override or the key for a missing file,
    a YAML error, a malformed override or an interpolation that cannot be resolved.
    """
    base = _read_yaml(path) if path else OmegaConf.create({})
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError([f"{o}: an override must look like key=value" for o in bad])
    try:
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))
        data = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        message = str(e).splitlines()[0]
        missing = re.match(r"Interpolation key '(.*)' not found", message)
        if missing:  # name the fix, not omegaconf's internals
            message = (
                f"${{{missing[1]}}} names no key of the config (an interpolation refers to "
                "another key, such as ${grpo.max_steps}, or to a variable: ${oc.env:NAME})"
            )
        raise ConfigError([f"{key}: {message}" if key else message]) from None
    return data  # type: ignore[return-value]


def _read_yaml(path: str) -> Any:
    if not os.path.isfile(path):
        raise ConfigError(
            [
                f"{path}: no such config file (expected the path of a YAML run config, such as examples/configs/grpo_tiny.yaml)"
            ]
        )
    try:
        # spanspec's reader: file:line:col for syntax errors, tabs and control characters named,
        # duplicate keys refused, and aliases that would expand without end stopped.
        data = parse_yaml(path).data
    except SpecError as e:
        raise ConfigError([_located(f) for f in e.findings]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{path}: a run config is a mapping of sections, not {type(data).__name__}"]
        )
    try:
        return OmegaConf.create(data)
    except OmegaConfBaseException as e:
        raise ConfigError([f"{path}: {str(e).splitlines()[0]}"]) from None


def _located(f: Finding) -> str:
    where = f"{f.file}:{f.line}:{f.col}" if f.line else f.file
    return f"{where}: {f.message}"


def validate_config(data: Any, model: type[M]) -> M:
    """Returns ``model.model_validate(data)``; raises ``ConfigError`` naming every bad key."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError([_describe(err, model) for err in e.errors()]) from None


def config_error(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> ConfigError:
    """``exc`` as the one-line-per-key :class:`ConfigError` the command line prints (no pydantic
    text, no URL, sensitive values not shown); ``prefix`` is where ``model`` sits
    (``"telemetry"``), used to build the Python API's errors of a config block."""
    return ConfigError([_describe(err, model, prefix) for err in exc.errors(include_url=False)])


def _describe(err: Any, model: type[BaseModel], prefix: str = "") -> str:
    inner = [str(p) for p in err["loc"]]
    loc = [prefix, *inner] if prefix and inner else inner
    key = ".".join(loc) or "<root>"
    if err["type"] == "extra_forbidden":
        fields = _fields_at(model, inner[:-1])
        hint = did_you_mean(loc[-1], fields) or f" (valid keys: {', '.join(fields)})"
        return f"{key}: unknown key{hint}"
    message = validation_message(str(err["msg"]))
    if not loc and err["type"] == "value_error":  # a check across sections names its own keys
        return message
    if err["type"] != "value_error" and "input" in err and not isinstance(err["input"], dict):
        message += f" (got {_shown(loc, err['input'])})"
    return f"{key}: {message}"


def _shown(loc: list[str], value: Any) -> str:
    """The value a message quotes: ``[REDACTED]`` for a sensitive setting (asked of the
    telemetry settings' declarations), URL credentials masked otherwise."""
    from spanspec._redact import scrub
    from spanspec.settings import FIELDS, REDACTED

    if loc and loc[0] == "telemetry" and any(f.sensitive and f.name in loc[1:] for f in FIELDS):
        return REDACTED
    return scrub(as_yaml(value))


def _fields_at(model: type[BaseModel], path: list[str]) -> list[str]:
    # Walk the nested models along the error's location to list the keys valid there.
    current: Any = model
    for part in path:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))
