"""TelemetryConfig: the telemetry: block, validated, unknown keys rejected with a suggestion."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nemo_rl.telemetry import TelemetryConfig


def test_defaults_and_only_given_keys_are_explicit():
    cfg = TelemetryConfig.model_validate({"span_groups": ["per_step", "-generation"]})
    assert cfg.enabled is True and cfg.span_groups == "per_step,-generation"
    assert cfg.explicit() == {"span_groups": "per_step,-generation"}


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(ValidationError) as info:
        TelemetryConfig.model_validate({"exporterr": "file", "span_group": "all"})
    text = str(info.value)
    assert "unknown key 'telemetry.exporterr' (did you mean 'exporter'?)" in text
    assert "unknown key 'telemetry.span_group' (did you mean 'span_groups'?)" in text


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("export_sample_rate", 2, "less than or equal to 1"),
        ("export_strategy", "random", "single_rank"),
        ("exporter", "kafka", "expected one of auto, otlp, console, file, prometheus, none"),
        ("enabled", "maybe", "valid boolean"),
        ("export_rank", -1, "greater than or equal to 0"),
    ],
)
def test_bad_values_are_rejected(key, value, message):
    with pytest.raises(ValidationError, match=message):
        TelemetryConfig.model_validate({key: value})


def test_the_block_has_exactly_the_settings_of_spanspec_and_nemo_rl():
    from nemo_rl.telemetry.config import RL_FIELDS
    from spanspec.settings import FIELDS

    declared = (*FIELDS, *RL_FIELDS)  # spanspec's, then nemo_rl's own (vllm_native_tracing)
    assert list(TelemetryConfig.model_fields) == [f.name for f in declared]
    defaults = TelemetryConfig().model_dump()
    # file_dir defaults to the run folder's telemetry/, chosen when the run starts.
    assert defaults == {f.name: f.default for f in declared} | {"file_dir": None}


def test_settings_read_under_the_registrys_prefixes(monkeypatch):
    from nemo_rl.telemetry.config import read_settings

    env = {"NEMO_RL_OTEL_VLLM_NATIVE_TRACING": "true", "NEMO_LENS_SPAN_GROUPS": "all"}
    settings = read_settings({"exporter": "console"}, env=env)
    assert settings.extra == {"vllm_native_tracing": True, "straggler_threshold": 0.1}
    assert settings.sources["vllm_native_tracing"] == "env NEMO_RL_OTEL_VLLM_NATIVE_TRACING"
    assert (settings.span_groups, settings.service_name) == ("all", "nemo-rl")
    assert settings.to_env()["NEMO_RL_OTEL_VLLM_NATIVE_TRACING"] == "true"
