"""Attribute values in their OpenTelemetry form, checked against their declaration: the
conversions :mod:`spanspec.runtime` applies to every attribute of an enabled span (numpy and
torch scalars become Python numbers, an int declared float becomes a float). A leaf."""

from __future__ import annotations

import numbers
from typing import Any

from spanspec.findings import a_type
from spanspec.spec import AttributeDef

__all__ = ["BAD", "FAST_TYPES", "coerce", "describe"]

FAST_TYPES: dict[str, type] = {
    "string": str,
    "int": int,
    "float": float,  # an int goes through _coerce: exported as a double, as declared
    "bool": bool,
}
BAD = object()


def coerce(decl: AttributeDef, value: Any) -> Any:
    """Return ``value`` in its OpenTelemetry form if it fits ``decl``, else ``BAD``."""
    if decl.type.endswith("[]"):
        if not isinstance(value, list | tuple):
            return BAD
        items = [_coerce_scalar(decl.type[:-2], v) for v in value]
        if any(v is BAD for v in items):
            return BAD
        value = tuple(items)
    else:
        value = _coerce_scalar(decl.type, value)
    if value is not BAD and not decl.accepts(list(value) if isinstance(value, tuple) else value):
        return BAD
    return value


def _coerce_scalar(kind: str, value: Any) -> Any:
    # numpy and torch scalars are numbers.Integral / numbers.Real; bool is never a number here.
    if isinstance(value, bool) or (
        hasattr(value, "dtype") and str(getattr(value, "dtype", "")) == "bool"
    ):
        return bool(value) if kind == "bool" else BAD
    if kind == "int" and isinstance(value, numbers.Integral):
        return int(value)
    if kind == "float" and isinstance(value, numbers.Real):
        return float(value)
    if kind == "string" and isinstance(value, str):
        return value
    return BAD


def describe(decl: AttributeDef) -> str:
    text = a_type(decl.type)
    if decl.allowed is not None:
        text += f" in {sorted(map(str, decl.allowed))}"
    return text
