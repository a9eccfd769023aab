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
        ("exporter", "kafka", "expected one of auto, otlp, console, file, none"),
        ("enabled", "maybe", "valid boolean"),
        ("export_rank", -1, "greater than or equal to 0"),
    ],
)
def test_bad_values_are_rejected(key, value, message):
    with pytest.raises(ValidationError, match=message):
        TelemetryConfig.model_validate({key: value})


def test_the_block_has_exactly_the_settings_of_spanspec():
    from spanspec.settings import FIELDS

    assert list(TelemetryConfig.model_fields) == [f.name for f in FIELDS]
    defaults = TelemetryConfig().model_dump()
    # file_dir defaults to the run folder's telemetry/, chosen when the run starts.
    assert defaults == {f.name: f.default for f in FIELDS} | {"file_dir": None}
