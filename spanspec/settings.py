"""Telemetry settings: environment over a mapping over defaults, each value with its source.

Every setting is read, in order, from

1. ``$<prefix><NAME>`` (``MYAPP_OTEL_ENABLED``),
2. ``$<fallback_prefix><NAME>`` for each fallback prefix, in order,
3. the mapping (the ``telemetry:`` block of a run config),
4. the default (the program's, then the library's),

and remembers which one it came from, so the effective settings can be printed with their
provenance. The prefixes are the program's: its registry declares them (``conventions:
env_prefix``) and the caller passes them in; with none, only the SDK's ``OTEL_*`` variables
apply. ``OTEL_SDK_DISABLED=true`` switches everything off whatever the rest says, and
``OTEL_SERVICE_NAME`` is read for ``service_name`` after the prefixes. A malformed value is a
:class:`SettingsError` that names the variable (or key), the value and what is allowed; every
problem is reported at once. An empty variable counts as unset.

A program adds settings of its own as :class:`FieldSpec` s built from the public parsers here
(``parse_bool``, ``parse_choice``...) and passes them as ``fields``: they are read, checked,
printed and written back like the library's (:attr:`Settings.extra`).

This module knows nothing about any particular program and imports no OpenTelemetry code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spanspec.findings import closest, did_you_mean
from spanspec.sdk_env import MAX_SHUTDOWN_TIMEOUT_S, otel_env_problems
from spanspec.spec import REDACTED, Conventions

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "EXPORTERS",
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
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_optional_text",
    "parse_text",
    "shown_value",
]

# What the OpenTelemetry SDK calls a service nobody named.
DEFAULT_SERVICE_NAME = "unknown_service"
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

    Each line reads ``MYAPP_OTEL_ENABLED='maybe': expected a boolean (true, false, 1, 0, yes,
    no, on, off)``: where the value came from, the value, and what is allowed.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if len(self.problems) == 1:
            super().__init__(f"invalid telemetry setting {self.problems[0]}")
        else:
            super().__init__("invalid telemetry settings:\n  " + "\n  ".join(self.problems))


# -- parsers: return the value in its Python type, or raise ValueError("what is allowed") ---------
# Public, so that a program declares its own settings with the same rules and messages.


def parse_bool(value: Any) -> bool:
    """Return ``value`` as a bool (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``).

    Raises:
        ValueError: saying what is allowed, for anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError("expected a boolean (true, false, 1, 0, yes, no, on, off)")


def parse_text(value: Any) -> str:
    """Return ``value`` stripped, a non-empty string.

    Raises:
        ValueError: for anything else, or only blanks.
    """
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError("expected a non-empty string")


def parse_optional_text(value: Any) -> str | None:
    """Return ``value`` as stripped text (an int reads as its digits), or None when empty or None.

    Raises:
        ValueError: for any other type.
    """
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


def parse_choice(allowed: tuple[str, ...]) -> Callable[[Any], str]:
    """Return a parser of one of ``allowed`` (case-insensitive); it raises ``ValueError`` listing
    them, with the closest one."""

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


def parse_int(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    """Return a parser of an integer ``>= minimum`` (and ``<= maximum``); it raises
    ``ValueError`` saying the bounds, also for a float or a bool."""
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


def parse_float(
    low: float, high: float | None, *, low_open: bool = False
) -> Callable[[Any], float]:
    """Return a parser of a finite number ``>= low`` (``> low`` with ``low_open``) and
    ``<= high``; it raises ``ValueError`` saying the bounds."""
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
    """One setting: its name (``enabled``), parser, default and one-line meaning.

    A program declares its own settings the same way and passes them to :func:`load_settings`
    as ``fields``.
    """

    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    sensitive: bool = False  # its value is never shown: tables, logs, errors say [REDACTED]

    def env_name(self, prefix: str) -> str:
        """Return the variable that sets this field under ``prefix``: ``MYAPP_OTEL_ENABLED``."""
        return prefix + self.name.upper()


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("enabled", parse_bool, True, "Master switch for traces, metrics and logs."),
    FieldSpec(
        "service_name",
        parse_text,
        DEFAULT_SERVICE_NAME,
        "The OpenTelemetry service.name of every process (default: the registry's "
        "conventions.service_name).",
    ),
    FieldSpec("span_groups", _groups, "default", "Group expression: which spans are emitted."),
    FieldSpec(
        "exporter",
        _exporters,
        "auto",
        "otlp, console, file, prometheus, none, or a comma list; auto: otlp when an "
        "OTEL_EXPORTER_OTLP_*ENDPOINT is set, else file. prometheus serves metrics only (and "
        "takes them from otlp).",
    ),
    FieldSpec(
        "file_dir", parse_text, "telemetry", "Folder of traces.jsonl, metrics.jsonl, logs.jsonl."
    ),
    FieldSpec("export_strategy", parse_choice(STRATEGIES), "single_rank", "Which ranks export."),
    FieldSpec("export_rank", parse_int(0), 0, "The rank that exports under single_rank."),
    FieldSpec(
        "export_sample_rate",
        parse_float(0.0, 1.0),
        0.1,
        "Fraction of ranks that export under sampled (export_rank always does).",
    ),
    FieldSpec("traces_enabled", parse_bool, True, "Export spans."),
    FieldSpec("metrics_enabled", parse_bool, True, "Export metrics."),
    FieldSpec(
        "logs_enabled", parse_bool, False, "Send Python logging records as OpenTelemetry logs."
    ),
    FieldSpec(
        "project",
        parse_optional_text,
        None,
        "Groups runs in a backend: the openinference.project.name and service.namespace resource "
        "attributes (default: the run folder's name).",
    ),
    FieldSpec(
        "prometheus_port",
        parse_int(1, 65535),
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
    FieldSpec(
        "run_id", parse_optional_text, None, "Identifier shared by every process of one job."
    ),
    FieldSpec(
        "user_id",
        parse_optional_text,
        None,
        "Who launched the run (sensitive; opt-in).",
        sensitive=True,
    ),
    FieldSpec(
        "shutdown_timeout_s",
        # Bounded: the flush must end before a scheduler's kill, and a huge value overflows the
        # SDK's thread waits (every queued span would be lost).
        parse_float(0.0, MAX_SHUTDOWN_TIMEOUT_S, low_open=True),
        5.0,
        "Upper bound on the final flush at shutdown, in seconds.",
    ),
    FieldSpec(
        "watchdog",
        parse_bool,
        True,
        "Warn (once, with stacks) when a span outlives the max_duration its registry entry declares.",
    ),
)
_BY_NAME = {f.name: f for f in FIELDS}
# Settings whose value is never printed (tables, logs): shown as [REDACTED].
SENSITIVE_FIELDS = frozenset(f.name for f in FIELDS if f.sensitive)


def shown_value(name: str, value: Any, fields: Sequence[FieldSpec] = ()) -> str:
    """``value`` of setting ``name`` as a message may show it: ``[REDACTED]`` when the setting is
    sensitive (here or among a program's ``fields``), else its repr with any URL credentials
    (userinfo, query string) masked. Every message that quotes a configured value uses this."""
    from spanspec._redact import scrub

    if name in SENSITIVE_FIELDS or any(f.name == name and f.sensitive for f in fields):
        return REDACTED
    return scrub(repr(value))


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


def otlp_signals_configured(env: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """The signals whose own ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` is set when the common
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is not; None when it is (every signal has an endpoint)."""
    env = os.environ if env is None else env
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return None
    return tuple(
        s
        for s in ("traces", "metrics", "logs")
        if env.get(f"OTEL_EXPORTER_OTLP_{s.upper()}_ENDPOINT", "").strip()
    )


@dataclass(frozen=True)
class Settings:
    """The effective telemetry settings. ``sources[name]`` says where each value came from:
    ``env MYAPP_OTEL_ENABLED``, ``config telemetry.enabled`` or ``default``.

    ``exporter`` is already resolved (never ``auto``); ``exporters`` splits it. The program's own
    settings (the ``fields`` given to :func:`load_settings`) are in :attr:`extra`, by name.
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
    project: str | None = _default("project")
    prometheus_port: int = _default("prometheus_port")
    prometheus_remote_write_url: str | None = _default("prometheus_remote_write_url")
    run_id: str | None = _default("run_id")
    user_id: str | None = _default("user_id")
    shutdown_timeout_s: float = _default("shutdown_timeout_s")
    watchdog: bool = _default("watchdog")
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The program's own settings (``fields`` of :func:`load_settings`), name -> value."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    fields: tuple[FieldSpec, ...] = field(default=(), compare=False, repr=False)
    """The declarations of :attr:`extra`, in order."""
    env_prefix: str | None = field(default=None, compare=False, repr=False)
    """The prefix the settings were read under (None: none), the default of :meth:`to_env`."""
    mapping_name: str = field(default="telemetry", compare=False, repr=False)
    auto_otlp_signals: tuple[str, ...] | None = None
    """Under ``exporter: auto`` with only some ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` set: the
    signals that go to OTLP; the others stay on the file exporter. None otherwise."""

    @property
    def exporters(self) -> tuple[str, ...]:
        """The exporters to build: ``()`` for ``none``, else e.g. ``("otlp", "file")``."""
        names = tuple(e for e in self.exporter.split(",") if e and e != "none")
        if self.auto_otlp_signals is not None:
            return (*names, "file")
        return names

    def _declared(self) -> dict[str, FieldSpec]:
        return {**_BY_NAME, **{f.name: f for f in self.fields}}

    def items(self) -> list[tuple[str, Any, str]]:
        """Return ``(name, value, source)`` for every setting, in declaration order: the
        library's, then the program's own."""
        return [
            (f.name, getattr(self, f.name), self.sources.get(f.name, "default")) for f in FIELDS
        ] + [
            (f.name, self.extra.get(f.name, f.default), self.sources.get(f.name, "default"))
            for f in self.fields
        ]

    def with_values(self, source: str, **values: Any) -> Settings:
        """Return a copy with ``values`` replaced (parsed like any other input) and ``source`` noted.

        Raises:
            SettingsError: for an unknown name or a malformed value.
        """
        declared = self._declared()
        problems: list[str] = []
        parsed: dict[str, Any] = {}
        for name, value in values.items():
            spec = declared.get(name)
            if spec is None:
                problems.append(f"{name}: unknown setting{did_you_mean(name, declared)}")
                continue
            try:
                parsed[name] = spec.parse(value)
            except ValueError as exc:
                problems.append(f"{name}={value!r}: {exc}")
        if problems:
            raise SettingsError(problems)
        core = {k: v for k, v in parsed.items() if k in _BY_NAME}
        extra = {**self.extra, **{k: v for k, v in parsed.items() if k not in _BY_NAME}}
        return replace(
            self, **core, extra=extra, sources={**self.sources, **dict.fromkeys(parsed, source)}
        )

    def to_env(self, prefix: str | None = None) -> dict[str, str]:
        """Return the settings as ``{PREFIX_NAME: text}``, ready for child processes to read back
        with the same prefix (default: the one they were read under). Values that are None are
        left out.

        Raises:
            ValueError: when there is no prefix (neither given nor read under).
        """
        prefix = prefix or self.env_prefix
        if not prefix:
            raise ValueError(
                "to_env needs an env prefix: pass one, or load the settings with the "
                "registry's conventions (conventions.env_prefix)"
            )
        declared = self._declared()
        out = {}
        for name, value, _ in self.items():
            if value is None:
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            if name == "exporter" and self.auto_otlp_signals is not None:
                text = "auto"  # a child resolves it per signal from the same OTEL_* variables
            out[declared[name].env_name(prefix)] = text
        return out

    def how_to_set(self, name: str) -> str:
        """How a person sets ``name``: ``MYAPP_OTEL_PROMETHEUS_PORT (or telemetry.prometheus_port)``,
        or ``telemetry.prometheus_port`` where the settings were read under no prefix."""
        key = f"{self.mapping_name}.{name}"
        if not self.env_prefix:
            return key
        return f"{self.env_prefix}{name.upper()} (or {key})"

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
    from spanspec._redact import scrub

    if value is None:
        return ""
    return REDACTED if name in SENSITIVE_FIELDS else scrub(str(value))


def _prefixes(
    conventions: Conventions | None, prefix: str | None, fallback_prefixes: Sequence[str] | None
) -> tuple[str | None, tuple[str, ...]]:
    """The prefix and fallbacks: given explicitly, else the conventions', else none."""
    conventions = conventions or Conventions()
    main = prefix if prefix is not None else conventions.env_prefix
    fallbacks = (
        tuple(fallback_prefixes)
        if fallback_prefixes is not None
        else conventions.env_fallback_prefixes
    )
    return (main or None), tuple(f for f in fallbacks if f)


def _all_fields(fields: Sequence[FieldSpec]) -> tuple[FieldSpec, ...]:
    for f in fields:
        if f.name in _BY_NAME:
            raise ValueError(f"field {f.name!r} is already a spanspec setting; name yours apart")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(
            f"fields declared twice: {sorted({n for n in names if names.count(n) > 1})}"
        )
    return (*FIELDS, *fields)


def load_settings(
    mapping: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    conventions: Conventions | None = None,
    prefix: str | None = None,
    fallback_prefixes: Sequence[str] | None = None,
    fields: Sequence[FieldSpec] = (),
    defaults: Mapping[str, Any] | None = None,
    mapping_name: str = "telemetry",
) -> Settings:
    """Resolve the settings from ``env`` (default ``os.environ``), then ``mapping``, then defaults.

    The variables are ``$<prefix><NAME>``, then ``$<fallback><NAME>``: ``prefix`` and
    ``fallback_prefixes`` when given, else the registry's ``conventions`` (its ``env_prefix`` and
    ``env_fallback_prefixes``); with neither, no such variable is read, only the SDK's
    ``OTEL_*``. A set ``$<prefix>*`` variable that names no setting is an error (a misspelling
    would otherwise do nothing). ``conventions.service_name`` is the default service name.
    ``fields`` declares the program's own settings, read the same way (:attr:`Settings.extra`).
    ``defaults`` overrides the defaults (a program's own, e.g. its file folder) and is reported
    as ``default``. ``mapping_name`` is how a mapping key is named in messages and sources
    (``config telemetry.enabled``). An ``exporter`` of ``auto`` is resolved here.

    Returns:
        The frozen :class:`Settings`.

    Raises:
        SettingsError: listing every malformed value and every unknown key in ``mapping`` or
            ``defaults``, and every unknown ``$<prefix>*`` variable, each with where it came
            from and what is allowed.
        ValueError: for ``fields`` that redeclare a setting (a bug in the program).
    """
    env = os.environ if env is None else env
    mapping = dict(mapping or {})
    prefix, fallbacks = _prefixes(conventions, prefix, fallback_prefixes)
    declared = _all_fields(fields)
    by_name = {f.name: f for f in declared}
    defaults = dict(defaults or {})
    if conventions is not None and conventions.service_name and "service_name" not in defaults:
        defaults["service_name"] = conventions.service_name
    problems: list[str] = []
    for where, given in (("config", mapping), ("defaults", defaults)):
        for key in given:
            if key not in by_name:
                label = f"{mapping_name}.{key}" if where == "config" else f"default {key}"
                problems.append(f"{label}: unknown setting{did_you_mean(key, by_name)}")

    if prefix:  # a misspelt variable would otherwise do nothing at all
        known = {spec.env_name(prefix) for spec in declared}
        for var in sorted(env):
            if var.startswith(prefix) and var not in known and env[var].strip():
                names = [spec.name.upper() for spec in declared]
                near = closest(var.removeprefix(prefix), names)
                hint = (
                    f" (did you mean '{prefix}{near}'?)"
                    if near
                    else f"; expected {prefix}<NAME>, NAME one of {', '.join(names)}"
                )
                problems.append(f"{var}: unknown variable{hint}")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in declared:
        candidates: list[tuple[str, Any]] = []
        for pre in (prefix, *fallbacks) if prefix else ():
            var = spec.env_name(pre)
            if env.get(var, "").strip():
                candidates.append((f"env {var}", env[var]))
        if spec.name == "service_name" and env.get("OTEL_SERVICE_NAME", "").strip():
            candidates.append(("env OTEL_SERVICE_NAME", env["OTEL_SERVICE_NAME"]))
        if spec.name in mapping and mapping[spec.name] is not None:
            candidates.append((f"config {mapping_name}.{spec.name}", mapping[spec.name]))
        if spec.name in defaults:
            candidates.append(("default", defaults[spec.name]))
        candidates.append(("default", spec.default))
        source, raw = candidates[0]
        try:
            values[spec.name] = spec.parse(raw)
        except ValueError as exc:
            where = source.split(" ", 1)[1] if " " in source else spec.name
            if source == "default":
                where = f"default {spec.name}"
            problems.append(f"{where}={shown_value(spec.name, raw, declared)}: {exc}")
            continue
        sources[spec.name] = source

    if problems:
        raise SettingsError(problems)

    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        values["enabled"] = False
        sources["enabled"] = "env OTEL_SDK_DISABLED"
    auto_otlp_signals: tuple[str, ...] | None = None
    if values["exporter"] == "auto":
        endpoint_var = otlp_endpoint_configured(env)
        values["exporter"] = "otlp" if endpoint_var else "file"
        why = f"{endpoint_var} is set" if endpoint_var else "no OTLP endpoint is set"
        own = otlp_signals_configured(env)
        if endpoint_var and own is not None:
            # Only some signals have an endpoint of their own: the others stay on their file
            # exporter rather than going to the default localhost:4317, where nothing listens.
            auto_otlp_signals = own
            rest = [s for s in ("traces", "metrics", "logs") if s not in own]
            named = ", ".join(f"OTEL_EXPORTER_OTLP_{s.upper()}_ENDPOINT" for s in own)
            why = f"otlp for {', '.join(own)} ({named} is set), file for {', '.join(rest)}"
        sources["exporter"] = f"{sources['exporter']} (auto: {why})"
    if values["enabled"]:
        exporters = [e for e in values["exporter"].split(",") if e != "none"]
        problems = otel_env_problems(env, exporters) if exporters else []
        if problems:
            raise SettingsError(problems)
    extra = {f.name: values.pop(f.name) for f in fields}
    return Settings(
        **values,
        auto_otlp_signals=auto_otlp_signals,
        extra=extra,
        sources=sources,
        fields=tuple(fields),
        env_prefix=prefix,
        mapping_name=mapping_name,
    )


def ignored_variables(
    env: Mapping[str, str] | None = None,
    *,
    conventions: Conventions | None = None,
    fallback_prefixes: Sequence[str] | None = None,
    fields: Sequence[FieldSpec] = (),
) -> list[str]:
    """The set ``<fallback_prefix>*`` variables that name no setting here (a predecessor's
    names may include some we lack): read by nothing, so worth one warning.

    The fallback prefixes are ``fallback_prefixes`` when given, else ``conventions``'; ``fields``
    are the program's own settings (see :func:`load_settings`).

    Returns:
        The variable names, sorted; empty without fallback prefixes.
    """
    env = os.environ if env is None else env
    _, fallbacks = _prefixes(conventions, None, fallback_prefixes)
    declared = _all_fields(fields)
    known = {spec.env_name(pre) for pre in fallbacks for spec in declared}
    return (
        sorted(
            var
            for var in env
            if var.startswith(tuple(fallbacks)) and var not in known and env[var].strip()
        )
        if fallbacks
        else []
    )
