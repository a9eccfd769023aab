"""``TelemetryConfig``: the ``telemetry:`` block of every run config.

Every field is optional in YAML; what is left out comes from the environment or the default (see
:mod:`spanspec.settings` for the order). Unknown keys are rejected with the closest valid one.
Each setting is declared once: spanspec's in :data:`spanspec.settings.FIELDS`, nemo_rl's own
(:data:`RL_FIELDS`: vLLM's native tracing) here, with spanspec's parsers (name, parser, default,
meaning); this model takes its defaults and docs from there, adds the types and the YAML-side
errors, and checks its values with the same rules (:func:`spanspec.settings.load_settings`). A
test fails when they name different settings.

:func:`read_settings` is ``load_settings`` as nemo_rl calls it: the env prefixes
(``NEMO_RL_OTEL_``, then ``NEMO_LENS_``) and the default service name come from the registry's
``conventions:`` block, the extra settings from :data:`RL_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from nemo_rl.utils.config import config_error
from spanspec.findings import did_you_mean
from spanspec.settings import (
    MAX_SHUTDOWN_TIMEOUT_S,
    STRATEGIES,
    FieldSpec,
    Settings,
    SettingsError,
    field_spec,
    load_settings,
    parse_bool,
    parse_float,
)
from spanspec.spec import Spec

__all__ = [
    "RL_FIELDS",
    "STRAGGLER_THRESHOLD",
    "VLLM_NATIVE_TRACING",
    "TelemetryConfig",
    "read_settings",
]
_UNSET: Any = object()

VLLM_NATIVE_TRACING = FieldSpec(
    "vllm_native_tracing", parse_bool, False, "Also switch on vLLM's own OpenTelemetry spans."
)
STRAGGLER_THRESHOLD = FieldSpec(
    "straggler_threshold",
    parse_float(0.0, None, low_open=True),
    0.10,
    "A rank slowest of its group by more than this share over the median, in at least half of "
    "the recent steps, is named a straggler.",
)
# nemo_rl's own settings, after spanspec's: read from NEMO_RL_OTEL_*, checked, printed and
# handed to workers like them (Settings.extra).
RL_FIELDS: tuple[FieldSpec, ...] = (VLLM_NATIVE_TRACING, STRAGGLER_THRESHOLD)
_RL_BY_NAME = {f.name: f for f in RL_FIELDS}


def read_settings(
    mapping: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    spec: Spec | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Settings:
    """Return :func:`spanspec.settings.load_settings` of ``mapping`` and ``env`` as nemo_rl reads
    them: the prefixes and service name of the registry's ``conventions`` (``spec``, default the
    discovered registry), and :data:`RL_FIELDS`.

    Raises:
        SettingsError: for a malformed value or an unknown key or ``NEMO_RL_OTEL_*`` variable.
        SpecError: for a registry that cannot be loaded.
    """
    if spec is None:
        import spanspec

        spec = spanspec.load()
    return load_settings(
        mapping, env=env, conventions=spec.conventions, fields=RL_FIELDS, defaults=defaults
    )


def _field(name: str, *, default: Any = _UNSET, doc: str = "", **constraints: Any) -> Any:
    """The pydantic field of setting ``name``: default and description from its one declaration
    (:data:`spanspec.settings.FIELDS` or :data:`RL_FIELDS`) unless given, plus the type
    constraints pydantic checks."""
    spec = _RL_BY_NAME[name] if name in _RL_BY_NAME else field_spec(name)
    value = spec.default if default is _UNSET else default
    return Field(value, description=doc or spec.doc, **constraints)


class TelemetryConfig(BaseModel):
    """The ``telemetry:`` block. ``model_fields_set`` says which keys the YAML actually gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, /, **data: Any) -> None:
        """Raises ``ConfigError`` (a ``ValueError``), one ``telemetry.key: message`` line per
        bad key as the command line prints it: no pydantic text, no sensitive value."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error(exc, TelemetryConfig, "telemetry") from None

    # Validation (model_validate, a run config holding this block) keeps pydantic's own path
    # and errors, which validate_config turns into the same lines: only a direct call runs this.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    enabled: bool = _field("enabled")
    service_name: str = _field("service_name")
    span_groups: str = _field("span_groups")
    exporter: str = _field("exporter")
    file_dir: str | None = _field(
        "file_dir",
        default=None,
        doc="Folder of the OTLP-JSON files; default <run folder>/telemetry.",
    )
    export_strategy: Literal[STRATEGIES] = _field("export_strategy")  # type: ignore[valid-type]
    export_rank: int = _field("export_rank", ge=0)
    export_sample_rate: float = _field("export_sample_rate", ge=0.0, le=1.0)
    traces_enabled: bool = _field("traces_enabled")
    metrics_enabled: bool = _field("metrics_enabled")
    logs_enabled: bool = _field("logs_enabled")
    project: str | None = _field(
        "project",
        doc="Groups runs in a backend (openinference.project.name, service.namespace); default "
        "the run folder's name.",
    )
    prometheus_port: int = _field("prometheus_port", ge=1, le=65535)
    prometheus_remote_write_url: str | None = _field("prometheus_remote_write_url")
    run_id: str | None = _field(
        "run_id", doc="Shared by every process; default $SLURM_JOB_ID, else random."
    )
    user_id: str | None = _field("user_id")
    shutdown_timeout_s: float = _field(
        "shutdown_timeout_s", gt=0, le=MAX_SHUTDOWN_TIMEOUT_S, allow_inf_nan=False
    )
    watchdog: bool = _field("watchdog")
    # nemo_rl's own (RL_FIELDS), after spanspec's.
    vllm_native_tracing: bool = _field("vllm_native_tracing")
    straggler_threshold: float = _field("straggler_threshold", gt=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = [str(k) for k in data if k not in cls.model_fields]
            if unknown:
                raise ValueError(
                    "; ".join(
                        f"unknown key 'telemetry.{k}'{did_you_mean(k, cls.model_fields)}"
                        for k in unknown
                    )
                    + f" (valid keys: {', '.join(cls.model_fields)})"
                )
        return data

    @field_validator("span_groups", mode="before")
    @classmethod
    def _groups_list(cls, value: Any) -> Any:
        return ",".join(map(str, value)) if isinstance(value, list | tuple) else value

    @field_validator("run_id", "user_id", "project", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _same_rules_as_env(self) -> TelemetryConfig:
        try:
            load_settings(self.explicit(), env={}, fields=RL_FIELDS)
        except SettingsError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return self

    def explicit(self) -> dict[str, Any]:
        """Return only the keys the YAML gave, for :func:`spanspec.settings.load_settings`."""
        return {name: getattr(self, name) for name in self.model_fields_set}
