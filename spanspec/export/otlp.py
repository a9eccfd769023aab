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


def otlp_destination(signal_name: str, protocol: str, env: Mapping[str, str] | None = None) -> str:
    """``grpc http://h:4317`` for messages; an endpoint no variable sets says it is the default,
    and which variables would set it (a signal sent there is usually lost)."""
    from spanspec._redact import redact_url

    env = os.environ if env is None else env
    where = f"{protocol} {redact_url(otlp_endpoint(signal_name, protocol, env))}"  # no secret
    own = f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_ENDPOINT"
    if not (env.get(own, "").strip() or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()):
        where += f" (the default: neither {own} nor OTEL_EXPORTER_OTLP_ENDPOINT is set)"
    return where


# Ports that speak only one OTLP transport, by convention or by product.
_HTTP_PORTS = {4318: "the OTLP/HTTP port", 6006: "Phoenix's HTTP port"}
_GRPC_PORTS = {4317: "the OTLP/gRPC port"}


def protocol_hint(signal_name: str, protocol: str, env: Mapping[str, str] | None = None) -> str:
    """A one-line hint when ``signal_name``'s endpoint likely speaks the other protocol, else "".

    gRPC (the Python default) sent to an HTTP port fails only with "Failed parsing HTTP/2" after a
    timeout; this names the variable to set instead.
    """
    from urllib.parse import urlsplit

    from spanspec._redact import redact_url

    endpoint = otlp_endpoint(signal_name, protocol, env)
    try:
        parts = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
        port = parts.port
    except ValueError:
        return ""
    var = "OTEL_EXPORTER_OTLP_PROTOCOL"
    if protocol == "grpc" and (port in _HTTP_PORTS or "/v1/" in parts.path):
        why = _HTTP_PORTS.get(port, "an OTLP/HTTP path")
        endpoint = redact_url(endpoint)
        return (
            f"{signal_name} go over gRPC to {endpoint}, which is {why}; "
            f"set {var}=http/protobuf (or use port 4317 for gRPC)"
        )
    if protocol == "http/protobuf" and port in _GRPC_PORTS:
        endpoint = redact_url(endpoint)
        return (
            f"{signal_name} go over HTTP to {endpoint}, which is {_GRPC_PORTS[port]}; "
            f"set {var}=grpc (or use port 4318 for HTTP)"
        )
    return ""
