"""``TelemetryConfig``: the ``telemetry:`` block of every run config.

Every field is optional in YAML; what is left out comes from the environment or the default (see
:mod:`spanspec.settings` for the order). Unknown keys are rejected with the closest valid one.
The value rules live in one place, :mod:`spanspec.settings`; this model adds types, field docs
and the YAML-side errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spanspec.findings import did_you_mean
from spanspec.settings import MAX_SHUTDOWN_TIMEOUT_S, SettingsError, load_settings

__all__ = ["TelemetryConfig"]


class TelemetryConfig(BaseModel):
    """The ``telemetry:`` block. ``model_fields_set`` says which keys the YAML actually gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Master switch for traces, metrics and logs.")
    service_name: str = Field("nemo-rl", description="OpenTelemetry service.name of every process.")
    span_groups: str = Field(
        "default",
        description="Group expression: which spans are emitted, e.g. per_step,-generation.",
    )
    exporter: str = Field(
        "auto",
        description="otlp, console, file, none or a comma list; auto: otlp when an OTLP endpoint "
        "variable is set, else file.",
    )
    file_dir: str | None = Field(
        None, description="Folder of the OTLP-JSON files; default <run folder>/telemetry."
    )
    export_strategy: Literal["single_rank", "all_ranks", "first_rank_per_node", "sampled"] = Field(
        "single_rank", description="Which worker ranks export (the driver always does)."
    )
    export_rank: int = Field(0, ge=0, description="The rank that exports under single_rank.")
    export_sample_rate: float = Field(
        0.1, ge=0.0, le=1.0, description="Share of ranks exporting under sampled."
    )
    traces_enabled: bool = Field(True, description="Export spans.")
    metrics_enabled: bool = Field(True, description="Export metrics.")
    logs_enabled: bool = Field(False, description="Send Python logging records as OTel logs.")
    vllm_native_tracing: bool = Field(False, description="Also switch on vLLM's own spans.")
    run_id: str | None = Field(
        None, description="Shared by every process; default $SLURM_JOB_ID, else random."
    )
    user_id: str | None = Field(None, description="Who launched the run (sensitive).")
    shutdown_timeout_s: float = Field(
        5.0,
        gt=0,
        le=MAX_SHUTDOWN_TIMEOUT_S,
        allow_inf_nan=False,
        description="Bound on the final flush, seconds.",
    )

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

    @field_validator("run_id", "user_id", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _same_rules_as_env(self) -> TelemetryConfig:
        try:
            load_settings(self.explicit(), env={})
        except SettingsError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return self

    def explicit(self) -> dict[str, Any]:
        """Return only the keys the YAML gave, for :func:`spanspec.settings.load_settings`."""
        return {name: getattr(self, name) for name in self.model_fields_set}
