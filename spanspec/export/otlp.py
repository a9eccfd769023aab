"""OTLP addressing, from the standard ``OTEL_EXPORTER_OTLP_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping

from spanspec.settings import SettingsError

# -- OTLP addressing, from the standard variables --------------------------------------------


def otlp_protocol(signal_name: str, env: Mapping[str, str] | None = None) -> str:
    """Return ``grpc`` or ``http/protobuf`` for ``signal_name`` (traces, metrics, logs).

    Raises:
        SettingsError: naming the variable when it holds anything else.
    """
    env = os.environ if env is None else env
    for var in (
        f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        value = env.get(var, "").strip()
        if value:
            if value.lower() not in ("grpc", "http/protobuf"):
                raise SettingsError(
                    [
                        f"{var}={value!r}: expected one of: grpc, http/protobuf"
                        + (" (http/json has no Python exporter)" if value == "http/json" else "")
                    ]
                )
            return value.lower()
    return "grpc"


def otlp_endpoint(signal_name: str, protocol: str, env: Mapping[str, str] | None = None) -> str:
    """Return the URL the official exporter will send ``signal_name`` to (for messages)."""
    env = os.environ if env is None else env
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if protocol == "grpc":
        return base or "http://localhost:4317"
    return f"{(base or 'http://localhost:4318').rstrip('/')}/v1/{signal_name}"
