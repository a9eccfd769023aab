"""The OpenTelemetry SDK's own environment variables, checked before any exporter is built, so
a bad one is named (``OTEL_BSP_MAX_QUEUE_SIZE='abc': expected a whole number > 0``) instead of
being blamed on an exporter. A leaf: :mod:`spanspec.settings` calls it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from spanspec._text import shorten

__all__ = ["MAX_SHUTDOWN_TIMEOUT_S", "otel_env_problems"]

MAX_SHUTDOWN_TIMEOUT_S = 3600.0
"""The longest wait, in seconds, a shutdown or an OTLP export timeout may be given."""

_SIGNALS = ("TRACES", "METRICS", "LOGS")
# Integers the SDK parses (milliseconds, counts); a bad one otherwise fails inside an exporter.
_SDK_INT_VARS = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BLRP_SCHEDULE_DELAY",
    "OTEL_BLRP_EXPORT_TIMEOUT",
    "OTEL_BLRP_MAX_QUEUE_SIZE",
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
)
_PROTOCOLS = ("grpc", "http/protobuf")
_COMPRESSIONS = ("gzip", "deflate", "none")


def _otlp_vars(name: str) -> list[str]:
    return [f"OTEL_EXPORTER_OTLP_{name}"] + [f"OTEL_EXPORTER_OTLP_{s}_{name}" for s in _SIGNALS]


def _endpoint_problem(var: str, value: str) -> str | None:
    from urllib.parse import urlsplit

    text = value.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises for a port that is not a number
    except ValueError:
        parts, port = None, None
    ok = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
    # The gRPC exporter also takes a bare host:port.
    if not ok and "://" not in text and ":" in text:
        host, _, digits = text.rpartition(":")
        ok = bool(host) and digits.isdigit()
    del port
    if ok:
        return None
    from spanspec._redact import redact_url

    return (
        f"{var}={redact_url(value)!r}: expected a URL such as http://localhost:4317 (gRPC) or "
        "http://localhost:4318 (http/protobuf)"
    )


def _protocols_reading(var: str, env: Mapping[str, str]) -> set[str]:
    """The protocols of the signals that read the endpoint variable ``var``."""
    signal = var.removeprefix("OTEL_EXPORTER_OTLP_").removesuffix("ENDPOINT").rstrip("_")
    signals = [signal] if signal else list(_SIGNALS)
    general = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip().lower()
    return {
        env.get(f"OTEL_EXPORTER_OTLP_{s}_PROTOCOL", "").strip().lower() or general or "grpc"
        for s in signals
    }


def _headers_problem(var: str, value: str) -> str | None:
    # The SDK skips a malformed pair with a log line, so a missing auth header would surface only
    # as the backend's 401. Values are never quoted: headers carry credentials.
    for index, item in enumerate(value.split(","), start=1):
        key, eq, _ = item.partition("=")
        if item.strip() and not (eq and key.strip()):
            return (
                f"{var} (value not shown: headers may hold credentials): item {index} is not "
                "key=value; expected comma-separated key=value pairs, values URL-encoded, such "
                "as api-key=abc123,x-team=rl"
            )
    return None


def _file_problem(var: str, value: str) -> str | None:
    try:
        with open(value.strip(), "rb"):
            return None
    except OSError as exc:
        return f"{var}={value!r}: cannot read the file ({exc.strerror}); expected a PEM file"


def otel_env_problems(env: Mapping[str, str], exporters: Iterable[str]) -> list[str]:
    """Return one line per malformed OpenTelemetry SDK variable that these ``exporters`` would read.

    Checked: the batch, metric-reader and limit integers (``OTEL_BSP_MAX_QUEUE_SIZE``...) and,
    with ``otlp``, every ``OTEL_EXPORTER_OTLP_[SIGNAL_]{ENDPOINT,PROTOCOL,TIMEOUT,COMPRESSION,
    HEADERS,INSECURE,CERTIFICATE,CLIENT_KEY,CLIENT_CERTIFICATE}``.
    """
    problems = []
    for var in _SDK_INT_VARS:
        text = env.get(var, "").strip()
        # A limit of 0 is allowed (the specification: keep none); a delay may be 0 too.
        zero_ok = var.endswith(("SCHEDULE_DELAY", "_LIMIT"))
        if text and not (text.isdigit() and (int(text) > 0 or zero_ok)):
            expected = "a whole number >= 0" if zero_ok else "a whole number > 0"
            problems.append(f"{var}={shorten(env[var], 60)!r}: expected {expected}")
    if "otlp" not in set(exporters):
        return problems
    for var in _otlp_vars("ENDPOINT"):
        text = env.get(var, "").strip()
        problem = _endpoint_problem(var, env[var]) if text else None
        if problem:
            problems.append(problem)
        elif text and "://" not in text and "http/protobuf" in _protocols_reading(var, env):
            problems.append(
                f"{var}={env[var]!r}: over http/protobuf the endpoint needs its scheme, such as "
                f"http://{text}"
            )
    for var in _otlp_vars("PROTOCOL"):
        text = env.get(var, "").strip()
        if text and text.lower() not in _PROTOCOLS:
            extra = " (http/json has no Python exporter)" if text.lower() == "http/json" else ""
            problems.append(f"{var}={env[var]!r}: expected one of: {', '.join(_PROTOCOLS)}{extra}")
    for var in _otlp_vars("TIMEOUT"):
        text = env.get(var, "").strip()
        if text:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if not (math.isfinite(number) and 0 < number <= MAX_SHUTDOWN_TIMEOUT_S):
                problems.append(
                    f"{var}={env[var]!r}: expected a number of seconds in "
                    f"(0, {MAX_SHUTDOWN_TIMEOUT_S:g}]"
                )
    for var in _otlp_vars("COMPRESSION"):
        text = env.get(var, "").strip()
        if text and text.lower() not in _COMPRESSIONS:
            problems.append(f"{var}={env[var]!r}: expected one of: {', '.join(_COMPRESSIONS)}")
    for var in _otlp_vars("HEADERS"):
        problem = _headers_problem(var, env[var]) if env.get(var, "").strip() else None
        if problem:
            problems.append(problem)
    for var in _otlp_vars("INSECURE"):
        text = env.get(var, "").strip()
        if text and text.lower() not in ("true", "false"):
            problems.append(f"{var}={env[var]!r}: expected true or false")
    for name in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"):
        for var in _otlp_vars(name):
            problem = _file_problem(var, env[var]) if env.get(var, "").strip() else None
            if problem:
                problems.append(problem)
    return problems
