"""Telemetry settings: environment over a mapping over defaults, each value with its source.

Every setting is read, in order, from

1. ``$<prefix><NAME>`` (``NEMO_RL_OTEL_ENABLED``),
2. ``$<fallback_prefix><NAME>`` (``NEMO_LENS_ENABLED``),
3. the mapping (the ``telemetry:`` block of a run config),
4. the default,

and remembers which one it came from, so the effective settings can be printed with their
provenance. ``OTEL_SDK_DISABLED=true`` switches everything off whatever the rest says, and
``OTEL_SERVICE_NAME`` is read for ``service_name`` after the two prefixes. A malformed value is a
:class:`SettingsError` that names the variable (or key), the value and what is allowed; every
problem is reported at once. An empty variable counts as unset.

This module knows nothing about any particular program and imports no OpenTelemetry code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spanspec.findings import closest, did_you_mean
from spanspec.sdk_env import MAX_SHUTDOWN_TIMEOUT_S, otel_env_problems
from spanspec.spec import REDACTED

__all__ = [
    "DEFAULT_PREFIX",
    "EXPORTERS",
    "FALLBACK_PREFIX",
    "FIELDS",
    "MAX_SHUTDOWN_TIMEOUT_S",
    "SENSITIVE_FIELDS",
    "STRATEGIES",
    "FieldSpec",
    "Settings",
    "SettingsError",
    "field_spec",
    "ignored_variables",
    "load_settings",
    "otel_env_problems",
    "otlp_endpoint_configured",
]

DEFAULT_PREFIX = "NEMO_RL_OTEL_"
FALLBACK_PREFIX = "NEMO_LENS_"
EXPORTERS = ("auto", "otlp", "console", "file", "prometheus", "none")
STRATEGIES = ("single_rank", "all_ranks", "first_rank_per_node", "sampled")

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_OTLP_ENDPOINT_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)


class SettingsError(ValueError):
    """A malformed setting. ``.problems`` lists one line per bad value; the message joins them.

    Each line reads ``NEMO_RL_OTEL_ENABLED='maybe': expected a boolean (true, false, 1, 0, yes,
    no, on, off)``: where the value came from, the value, and what is allowed.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if len(self.problems) == 1:
            super().__init__(f"invalid telemetry setting {self.problems[0]}")
        else:
            super().__init__("invalid telemetry settings:\n  " + "\n  ".join(self.problems))


# -- parsers: return the value in its Python type, or raise ValueError("what is allowed") ---------


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError("expected a boolean (true, false, 1, 0, yes, no, on, off)")


def _str(value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError("expected a non-empty string")


def _optional_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value).strip() or None
    raise ValueError("expected a string")


def _groups(value: Any) -> str:
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if isinstance(value, str):
        words = [p.strip() for p in value.split(",")]
        if all(words) or (value.strip() and all(words[:-1]) and not words[-1]):
            return ",".join(w for w in words if w)  # one trailing comma is harmless
        # An empty word would silently switch every span off; say so instead.
        raise ValueError(
            "expected a group expression such as 'per_step,-generation' (it has an empty word "
            "between commas; to emit no spans, set traces_enabled=false)"
            if value.strip()
            else "expected a group expression such as 'per_step,-generation', not an empty one"
        )
    raise ValueError("expected a group expression such as 'per_step,-generation'")


def _choice(allowed: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in allowed:
            return value.strip().lower()
        hint = ""
        if isinstance(value, str):
            close = closest(value.strip().lower(), allowed)
            hint = f"; did you mean '{close}'?" if close else ""
        raise ValueError(f"expected one of: {', '.join(allowed)}{hint}")

    return parse


def _exporters(value: Any) -> str:
    """A comma list of exporters, e.g. ``file`` or ``otlp,file``; ``auto`` and ``none`` stand alone."""
    words = value if isinstance(value, list | tuple) else str(value).split(",")
    words = [str(w).strip().lower() for w in words if str(w).strip()]
    allowed = f"one of {', '.join(EXPORTERS)}, or a comma list of otlp, console, file, prometheus"
    if not words or any(w not in EXPORTERS for w in words):
        bad = [w for w in words if w not in EXPORTERS]
        close = closest(bad[0], EXPORTERS) if bad else None
        hint = f"; did you mean '{close}'?" if close else ""
        raise ValueError(f"expected {allowed}{hint}")
    if len(words) > 1 and ({"auto", "none"} & set(words)):
        raise ValueError(f"expected {allowed} ('auto' and 'none' cannot be combined)")
    return ",".join(dict.fromkeys(words))


def _remote_write_url(value: Any) -> str | None:
    """An ``http(s)://host[:port]/path`` URL (a Prometheus remote-write receiver), or None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from urllib.parse import urlsplit

    expected = "expected an http(s) URL such as http://127.0.0.1:9090/api/v1/write"
    if not isinstance(value, str):
        raise ValueError(expected)
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        raise ValueError(expected) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(expected)
    if parts.path in ("", "/"):
        raise ValueError(f"{expected} (the path is missing: Prometheus takes /api/v1/write)")
    return value.strip()


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    expected = (
        f"an integer >= {minimum}"
        if maximum is None
        else (f"an integer between {minimum} and {maximum}")
    )

    def parse(value: Any) -> int:
        try:
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError
            number = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected {expected}") from None
        if number < minimum or (maximum is not None and number > maximum):
            raise ValueError(f"expected {expected}")
        return number

    return parse


def _float_between(
    low: float, high: float | None, *, low_open: bool = False
) -> Callable[[Any], float]:
    bounds = f"> {low}" if low_open else f">= {low}"
    if high is not None:
        bounds = f"between {low} and {high}" if not low_open else f"in ({low}, {high}]"

    def parse(value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number {bounds}") from None
        too_low = number <= low if low_open else number < low
        if not math.isfinite(number) or too_low or (high is not None and number > high):
            raise ValueError(f"expected a number {bounds}")
        return number

    return parse


@dataclass(frozen=True)
class FieldSpec:
    """One setting: its name (``enabled``), parser, default and one-line meaning."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str

    def env_name(self, prefix: str) -> str:
        """Return the variable that sets this field under ``prefix``: ``NEMO_RL_OTEL_ENABLED``."""
        return prefix + self.name.upper()


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("enabled", _bool, True, "Master switch for traces, metrics and logs."),
    FieldSpec("service_name", _str, "nemo-rl", "The OpenTelemetry service.name of every process."),
    FieldSpec("span_groups", _groups, "default", "Group expression: which spans are emitted."),
    FieldSpec(
        "exporter",
        _exporters,
        "auto",
        "otlp, console, file, prometheus, none, or a comma list; auto: otlp when an "
        "OTEL_EXPORTER_OTLP_*ENDPOINT is set, else file. prometheus serves metrics only (and "
        "takes them from otlp).",
    ),
    FieldSpec("file_dir", _str, "telemetry", "Folder of traces.jsonl, metrics.jsonl, logs.jsonl."),
    FieldSpec("export_strategy", _choice(STRATEGIES), "single_rank", "Which ranks export."),
    FieldSpec("export_rank", _int_at_least(0), 0, "The rank that exports under single_rank."),
    FieldSpec(
        "export_sample_rate",
        _float_between(0.0, 1.0),
        0.1,
        "Fraction of ranks that export under sampled (export_rank always does).",
    ),
    FieldSpec("traces_enabled", _bool, True, "Export spans."),
    FieldSpec("metrics_enabled", _bool, True, "Export metrics."),
    FieldSpec("logs_enabled", _bool, False, "Send Python logging records as OpenTelemetry logs."),
    FieldSpec(
        "vllm_native_tracing", _bool, False, "Also switch on vLLM's own OpenTelemetry spans."
    ),
    FieldSpec(
        "project",
        _optional_str,
        None,
        "Groups runs in a backend: the openinference.project.name and service.namespace resource "
        "attributes (default: the run folder's name).",
    ),
    FieldSpec(
        "prometheus_port",
        _int_at_least(1, 65535),
        9464,
        "With the prometheus exporter: each exporting process serves /metrics on 127.0.0.1, on "
        "the first free port from this one.",
    ),
    FieldSpec(
        "prometheus_remote_write_url",
        _remote_write_url,
        None,
        "With the prometheus exporter: push every export, the last one at shutdown too, to this "
        "Prometheus remote-write URL (http://host:9090/api/v1/write) instead of serving /metrics.",
    ),
    FieldSpec("run_id", _optional_str, None, "Identifier shared by every process of one job."),
    FieldSpec("user_id", _optional_str, None, "Who launched the run (sensitive; opt-in)."),
    FieldSpec(
        "shutdown_timeout_s",
        # Bounded: the flush must end before a scheduler's kill, and a huge value overflows the
        # SDK's thread waits (every queued span would be lost).
        _float_between(0.0, MAX_SHUTDOWN_TIMEOUT_S, low_open=True),
        5.0,
        "Upper bound on the final flush at shutdown, in seconds.",
    ),
    FieldSpec(
        "watchdog",
        _bool,
        True,
        "Warn (once, with stacks) when a span outlives the max_duration its registry entry declares.",
    ),
)
_BY_NAME = {f.name: f for f in FIELDS}
# Settings whose value is never printed (tables, logs): shown as [REDACTED].
SENSITIVE_FIELDS = frozenset({"user_id"})


def field_spec(name: str) -> FieldSpec:
    """The declaration of setting ``name`` (its parser, default and meaning).

    Raises:
        KeyError: for a name that is not a setting.
    """
    return _BY_NAME[name]


def _default(name: str) -> Any:
    return _BY_NAME[name].default


def otlp_endpoint_configured(env: Mapping[str, str] | None = None) -> str | None:
    """Return the first ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variable that is set, or None."""
    env = os.environ if env is None else env
    return next((var for var in _OTLP_ENDPOINT_VARS if env.get(var, "").strip()), None)


@dataclass(frozen=True)
class Settings:
    """The effective telemetry settings. ``sources[name]`` says where each value came from:
    ``env NEMO_RL_OTEL_ENABLED``, ``config telemetry.enabled`` or ``default``.

    ``exporter`` is already resolved (never ``auto``); ``exporters`` splits it.
    """

    enabled: bool = _default("enabled")
    service_name: str = _default("service_name")
    span_groups: str = _default("span_groups")
    exporter: str = "file"  # resolved: what the default "auto" gives when no endpoint is set
    file_dir: str = _default("file_dir")
    export_strategy: str = _default("export_strategy")
    export_rank: int = _default("export_rank")
    export_sample_rate: float = _default("export_sample_rate")
    traces_enabled: bool = _default("traces_enabled")
    metrics_enabled: bool = _default("metrics_enabled")
    logs_enabled: bool = _default("logs_enabled")
    vllm_native_tracing: bool = _default("vllm_native_tracing")
    project: str | None = _default("project")
    prometheus_port: int = _default("prometheus_port")
    prometheus_remote_write_url: str | None = _default("prometheus_remote_write_url")
    run_id: str | None = _default("run_id")
    user_id: str | None = _default("user_id")
    shutdown_timeout_s: float = _default("shutdown_timeout_s")
    watchdog: bool = _default("watchdog")
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def exporters(self) -> tuple[str, ...]:
        """The exporters to build: ``()`` for ``none``, else e.g. ``("otlp", "file")``."""
        return tuple(e for e in self.exporter.split(",") if e and e != "none")

    def items(self) -> list[tuple[str, Any, str]]:
        """Return ``(name, value, source)`` for every setting, in declaration order."""
        return [
            (f.name, getattr(self, f.name), self.sources.get(f.name, "default")) for f in FIELDS
        ]

    def with_values(self, source: str, **values: Any) -> Settings:
        """Return a copy with ``values`` replaced (parsed like any other input) and ``source`` noted.

        Raises:
            SettingsError: for an unknown name or a malformed value.
        """
        problems: list[str] = []
        parsed = {}
        for name, value in values.items():
            spec = _BY_NAME.get(name)
            if spec is None:
                problems.append(f"{name}: unknown setting{did_you_mean(name, _BY_NAME)}")
                continue
            try:
                parsed[name] = spec.parse(value)
            except ValueError as exc:
                problems.append(f"{name}={value!r}: {exc}")
        if problems:
            raise SettingsError(problems)
        return replace(self, **parsed, sources={**self.sources, **dict.fromkeys(parsed, source)})

    def to_env(self, prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
        """Return the settings as ``{PREFIX_NAME: text}``, ready for child processes to read back.

        Values that are None are left out.
        """
        out = {}
        for name, value, _ in self.items():
            if value is None:
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            out[_BY_NAME[name].env_name(prefix)] = text
        return out

    def format_table(self) -> str:
        """Return the settings as an aligned text table: name, value, source.

        A sensitive setting (``user_id``) that is set shows as ``[REDACTED]``.
        """
        rows = [("setting", "value", "source")] + [
            (name, _shown(name, value), source) for name, value, source in self.items()
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}".rstrip() for r in rows)


def _shown(name: str, value: Any) -> str:
    if value is None:
        return ""
    return REDACTED if name in SENSITIVE_FIELDS else str(value)


def load_settings(
    mapping: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    prefix: str = DEFAULT_PREFIX,
    fallback_prefix: str | None = FALLBACK_PREFIX,
    defaults: Mapping[str, Any] | None = None,
    mapping_name: str = "telemetry",
) -> Settings:
    """Resolve the settings from ``env`` (default ``os.environ``), then ``mapping``, then defaults.

    ``defaults`` overrides the library defaults (a program's own, e.g. its file folder) and is
    reported as ``default``. ``mapping_name`` is how a mapping key is named in messages and
    sources (``config telemetry.enabled``). An ``exporter`` of ``auto`` is resolved here.

    Returns:
        The frozen :class:`Settings`.

    Raises:
        SettingsError: listing every malformed value and every unknown key in ``mapping`` or
            ``defaults``, each with where it came from and what is allowed.
    """
    env = os.environ if env is None else env
    mapping = dict(mapping or {})
    problems: list[str] = []
    for where, given in (("config", mapping), ("defaults", dict(defaults or {}))):
        for key in given:
            if key not in _BY_NAME:
                label = f"{mapping_name}.{key}" if where == "config" else f"default {key}"
                problems.append(f"{label}: unknown setting{did_you_mean(key, _BY_NAME)}")

    if prefix:  # a misspelt variable would otherwise do nothing at all
        known = {spec.env_name(prefix) for spec in FIELDS}
        for var in sorted(env):
            if var.startswith(prefix) and var not in known and env[var].strip():
                names = [spec.name.upper() for spec in FIELDS]
                near = closest(var.removeprefix(prefix), names)
                hint = (
                    f" (did you mean '{prefix}{near}'?)"
                    if near
                    else f"; expected {prefix}<NAME>, NAME one of {', '.join(names)}"
                )
                problems.append(f"{var}: unknown variable{hint}")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in FIELDS:
        candidates: list[tuple[str, Any]] = []
        for pre in (prefix, fallback_prefix):
            if pre:
                var = spec.env_name(pre)
                if env.get(var, "").strip():
                    candidates.append((f"env {var}", env[var]))
        if spec.name == "service_name" and env.get("OTEL_SERVICE_NAME", "").strip():
            candidates.append(("env OTEL_SERVICE_NAME", env["OTEL_SERVICE_NAME"]))
        if spec.name in mapping and mapping[spec.name] is not None:
            candidates.append((f"config {mapping_name}.{spec.name}", mapping[spec.name]))
        if defaults and spec.name in defaults:
            candidates.append(("default", defaults[spec.name]))
        candidates.append(("default", spec.default))
        source, raw = candidates[0]
        try:
            values[spec.name] = spec.parse(raw)
        except ValueError as exc:
            where = source.split(" ", 1)[1] if " " in source else spec.name
            if source == "default":
                where = f"default {spec.name}"
            problems.append(f"{where}={raw!r}: {exc}")
            continue
        sources[spec.name] = source

    if problems:
        raise SettingsError(problems)

    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        values["enabled"] = False
        sources["enabled"] = "env OTEL_SDK_DISABLED"
    if values["exporter"] == "auto":
        endpoint_var = otlp_endpoint_configured(env)
        values["exporter"] = "otlp" if endpoint_var else "file"
        why = f"{endpoint_var} is set" if endpoint_var else "no OTLP endpoint is set"
        sources["exporter"] = f"{sources['exporter']} (auto: {why})"
    if values["enabled"]:
        exporters = [e for e in values["exporter"].split(",") if e != "none"]
        problems = otel_env_problems(env, exporters) if exporters else []
        if problems:
            raise SettingsError(problems)
    return Settings(**values, sources=sources)


def ignored_variables(
    env: Mapping[str, str] | None = None, fallback_prefix: str = FALLBACK_PREFIX
) -> list[str]:
    """The set ``<fallback_prefix>*`` variables that name no setting here (nemo-lens has some we
    lack, such as ``NEMO_LENS_SAMPLER_ENABLED``): read by nothing, so worth one warning."""
    env = os.environ if env is None else env
    known = {spec.env_name(fallback_prefix) for spec in FIELDS}
    return sorted(
        var
        for var in env
        if var.startswith(fallback_prefix) and var not in known and env[var].strip()
    )
