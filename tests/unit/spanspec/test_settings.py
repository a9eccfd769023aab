"""Settings: $<prefix>* over $<fallback>* over the mapping over defaults, each with its source.

The prefixes are the caller's (a registry's conventions); most tests use nemo_rl's.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest

from spanspec.settings import (
    FIELDS,
    FieldSpec,
    Settings,
    SettingsError,
    ignored_variables,
    load_settings,
    parse_bool,
    parse_int,
)
from spanspec.spec import Conventions

RL = Conventions(env_prefix="NEMO_RL_OTEL_", env_fallback_prefixes=("NEMO_LENS_",))
load_rl = partial(load_settings, conventions=RL)


def test_defaults_name_their_source():
    s = load_settings(env={})
    assert (s.enabled, s.span_groups, s.export_strategy, s.exporter) == (
        True,
        "default",
        "single_rank",
        "file",
    )
    assert s.sources["enabled"] == "default"
    assert s.sources["exporter"] == "default (auto: no OTLP endpoint is set)"
    assert s.shutdown_timeout_s == 5.0
    assert [name for name, _, _ in s.items()] == [f.name for f in FIELDS]


def test_env_beats_mapping_beats_default():
    env = {"NEMO_RL_OTEL_EXPORTER": "console"}
    s = load_rl({"exporter": "file", "span_groups": "per_step"}, env=env)
    assert s.exporter == "console"
    assert s.sources["exporter"] == "env NEMO_RL_OTEL_EXPORTER"
    assert s.span_groups == "per_step"
    assert s.sources["span_groups"] == "config telemetry.span_groups"
    assert s.sources["export_rank"] == "default"


def test_nemo_lens_is_the_fallback_prefix():
    s = load_rl({"span_groups": "default"}, env={"NEMO_LENS_SPAN_GROUPS": "all"})
    assert (s.span_groups, s.sources["span_groups"]) == ("all", "env NEMO_LENS_SPAN_GROUPS")
    both = {"NEMO_LENS_SPAN_GROUPS": "all", "NEMO_RL_OTEL_SPAN_GROUPS": "per_step"}
    s = load_rl(env=both)
    assert (s.span_groups, s.sources["span_groups"]) == ("per_step", "env NEMO_RL_OTEL_SPAN_GROUPS")


def test_prefixes_are_parameters():
    s = load_settings(env={"MYAPP_ENABLED": "false"}, prefix="MYAPP_", fallback_prefixes=None)
    assert s.enabled is False and s.sources["enabled"] == "env MYAPP_ENABLED"
    # explicit prefixes win over the conventions'
    s = load_rl(env={"MYAPP_ENABLED": "false", "NEMO_RL_OTEL_ENABLED": "true"}, prefix="MYAPP_")
    assert s.enabled is False


def test_without_a_prefix_only_the_sdk_variables_apply():
    env = {"NEMO_RL_OTEL_ENABLED": "false", "NEMO_LENS_SPAN_GROUPS": "all", "OTEL_SDK_DISABLED": ""}
    s = load_settings(env=env)
    assert (s.enabled, s.span_groups) == (True, "default")
    assert s.service_name == "unknown_service"  # the SDK's name for an unnamed service
    assert load_settings(env={"OTEL_SERVICE_NAME": "svc"}).service_name == "svc"
    with pytest.raises(ValueError, match="needs an env prefix"):
        s.to_env()


def test_the_conventions_name_the_prefixes_and_the_service():
    conventions = Conventions(
        env_prefix="SHOP_OTEL_", env_fallback_prefixes=("SHOP_",), service_name="shop"
    )
    s = load_settings(env={"SHOP_EXPORTER": "console"}, conventions=conventions)
    assert (s.exporter, s.sources["exporter"]) == ("console", "env SHOP_EXPORTER")
    assert (s.service_name, s.sources["service_name"]) == ("shop", "default")
    assert s.to_env()["SHOP_OTEL_EXPORTER"] == "console"
    assert (
        s.how_to_set("prometheus_port")
        == "SHOP_OTEL_PROMETHEUS_PORT (or telemetry.prometheus_port)"
    )
    with pytest.raises(
        SettingsError,
        match=r"SHOP_OTEL_EXPORTR: unknown variable \(did you mean 'SHOP_OTEL_EXPORTER'\?\)",
    ):
        load_settings(env={"SHOP_OTEL_EXPORTR": "file"}, conventions=conventions)


SAMPLE = FieldSpec("sample_every", parse_int(1), 10, "Keep one batch in this many.")
TURBO = FieldSpec("turbo", parse_bool, False, "Go faster.")


def test_a_program_declares_settings_of_its_own():
    env = {"NEMO_RL_OTEL_TURBO": "yes"}
    s = load_rl({"sample_every": "3"}, env=env, fields=(SAMPLE, TURBO))
    assert s.extra == {"sample_every": 3, "turbo": True}
    assert s.sources["turbo"] == "env NEMO_RL_OTEL_TURBO"
    assert [n for n, _, _ in s.items()][-2:] == ["sample_every", "turbo"]
    assert "turbo" in s.format_table() and s.to_env()["NEMO_RL_OTEL_SAMPLE_EVERY"] == "3"
    again = load_rl(env=s.to_env(), fields=(SAMPLE, TURBO))
    assert again.extra == s.extra
    assert s.with_values("cli", turbo="off").extra["turbo"] is False
    # checked like the library's own: a bad value, a misspelt variable
    with pytest.raises(SettingsError) as info:
        load_rl(env={"NEMO_RL_OTEL_SAMPLE_EVERY": "0", "NEMO_RL_OTEL_TURB": "1"}, fields=(SAMPLE,))
    assert any(
        "NEMO_RL_OTEL_SAMPLE_EVERY='0': expected an integer >= 1" in p for p in info.value.problems
    )
    assert any("NEMO_RL_OTEL_TURB: unknown variable" in p for p in info.value.problems)
    # without the declaration, the key is unknown
    with pytest.raises(SettingsError, match=r"telemetry\.turbo: unknown setting"):
        load_rl({"turbo": True}, env={})
    with pytest.raises(ValueError, match="already a spanspec setting"):
        load_settings(fields=(FieldSpec("enabled", parse_bool, True, "again"),), env={})


def test_ignored_fallback_variables_are_listed():
    env = {"NEMO_LENS_SAMPLER_ENABLED": "1", "NEMO_LENS_ENABLED": "1", "NEMO_LENS_TURBO": "1"}
    assert ignored_variables(env, conventions=RL) == [
        "NEMO_LENS_SAMPLER_ENABLED",
        "NEMO_LENS_TURBO",
    ]
    assert ignored_variables(env, conventions=RL, fields=(TURBO,)) == ["NEMO_LENS_SAMPLER_ENABLED"]
    assert ignored_variables(env) == []


def test_empty_variable_counts_as_unset():
    s = load_rl({"export_rank": 2}, env={"NEMO_RL_OTEL_EXPORT_RANK": "  "})
    assert s.export_rank == 2


def test_otel_sdk_disabled_turns_everything_off():
    s = load_rl({"enabled": True}, env={"OTEL_SDK_DISABLED": "true", "NEMO_RL_OTEL_ENABLED": "1"})
    assert s.enabled is False
    assert s.sources["enabled"] == "env OTEL_SDK_DISABLED"
    assert load_rl(env={"OTEL_SDK_DISABLED": "false"}).enabled is True


def test_otel_service_name_is_read_after_the_prefixes():
    assert load_rl(env={"OTEL_SERVICE_NAME": "svc"}).service_name == "svc"
    s = load_rl(env={"OTEL_SERVICE_NAME": "svc", "NEMO_RL_OTEL_SERVICE_NAME": "mine"})
    assert s.service_name == "mine"


def test_auto_exporter_is_otlp_when_an_endpoint_is_set():
    s = load_settings(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert s.exporter == "otlp"
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set" in s.sources["exporter"]
    assert (
        load_settings({"exporter": "file"}, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "x"}).exporter
        == "file"
    )


def test_exporter_lists_and_none():
    s = load_settings({"exporter": "OTLP, file,otlp"}, env={})
    assert s.exporter == "otlp,file" and s.exporters == ("otlp", "file")
    assert load_settings({"exporter": "none"}, env={}).exporters == ()


def test_yaml_types_and_lists():
    s = load_settings(
        {"enabled": False, "span_groups": ["per_step", "-generation"], "run_id": 1234}, env={}
    )
    assert s.enabled is False and s.span_groups == "per_step,-generation" and s.run_id == "1234"


@pytest.mark.parametrize(
    ("var", "value", "allowed"),
    [
        (
            "NEMO_RL_OTEL_ENABLED",
            "maybe",
            "expected a boolean (true, false, 1, 0, yes, no, on, off)",
        ),
        ("NEMO_RL_OTEL_LOGS_ENABLED", "2", "expected a boolean"),
        ("NEMO_RL_OTEL_EXPORTER", "kafka", "otlp, console, file, prometheus, none"),
        ("NEMO_RL_OTEL_EXPORTER", "auto,file", "cannot be combined"),
        (
            "NEMO_RL_OTEL_EXPORT_STRATEGY",
            "random",
            "single_rank, all_ranks, first_rank_per_node, sampled",
        ),
        ("NEMO_RL_OTEL_EXPORT_SAMPLE_RATE", "2", "expected a number between 0.0 and 1.0"),
        ("NEMO_RL_OTEL_EXPORT_SAMPLE_RATE", "half", "expected a number between 0.0 and 1.0"),
        ("NEMO_RL_OTEL_EXPORT_RANK", "-1", "expected an integer >= 0"),
        ("NEMO_RL_OTEL_EXPORT_RANK", "1.5", "expected an integer >= 0"),
        ("NEMO_RL_OTEL_SHUTDOWN_TIMEOUT_S", "0", "expected a number in (0.0, 3600.0]"),
        ("NEMO_LENS_ENABLED", "sure", "expected a boolean"),
        ("NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL", "127.0.0.1:9090", "expected an http(s) URL"),
        ("NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL", "ftp://h/api/v1/write", "expected an http"),
        ("NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL", "http://h:x/api/v1/write", "expected an"),
        ("NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL", "http://h:9090", "takes /api/v1/write"),
    ],
)
def test_a_malformed_variable_names_itself_its_value_and_what_is_allowed(var, value, allowed):
    with pytest.raises(SettingsError) as info:
        load_rl(env={var: value})
    message = str(info.value)
    assert f"{var}={value!r}" in message
    assert allowed in message


def test_a_near_miss_gets_a_suggestion():
    with pytest.raises(SettingsError, match="did you mean 'sampled'"):
        load_rl(env={"NEMO_RL_OTEL_EXPORT_STRATEGY": "sampeld"})


def test_every_problem_is_reported_at_once():
    env = {"NEMO_RL_OTEL_ENABLED": "maybe", "NEMO_RL_OTEL_EXPORT_SAMPLE_RATE": "2"}
    with pytest.raises(SettingsError) as info:
        load_rl({"exporterr": "file", "export_rank": "x"}, env=env)
    problems = info.value.problems
    assert len(problems) == 4
    assert any(
        "telemetry.exporterr: unknown setting (did you mean 'exporter'?)" in p for p in problems
    )
    assert any(p.startswith("telemetry.export_rank='x'") for p in problems)


def test_mapping_values_are_checked_too():
    with pytest.raises(SettingsError, match=r"telemetry.export_sample_rate=2: expected a number"):
        load_settings({"export_sample_rate": 2}, env={})


def test_to_env_round_trips():
    s = load_rl({"exporter": "console", "run_id": "abc", "export_sample_rate": 0.5}, env={})
    env = s.to_env()
    assert env["NEMO_RL_OTEL_ENABLED"] == "true" and "NEMO_RL_OTEL_USER_ID" not in env
    again = load_rl(env=env)
    assert [(n, v) for n, v, _ in again.items()] == [(n, v) for n, v, _ in s.items()]
    assert again.sources["run_id"] == "env NEMO_RL_OTEL_RUN_ID"


def test_with_values_parses_and_records_the_source():
    s = Settings().with_values("generated", run_id="r1")
    assert s.run_id == "r1" and s.sources["run_id"] == "generated"
    with pytest.raises(SettingsError, match="unknown setting"):
        Settings().with_values("x", nope=1)


def test_format_table_lists_value_and_source():
    table = load_rl(env={"NEMO_RL_OTEL_EXPORT_RANK": "3"}).format_table()
    assert "export_rank" in table and "env NEMO_RL_OTEL_EXPORT_RANK" in table


def test_each_setting_is_declared_once_in_fields():
    bookkeeping = {"extra", "sources", "fields", "env_prefix", "mapping_name", "auto_otlp_signals"}
    names = [f.name for f in dataclasses.fields(Settings) if f.name not in bookkeeping]
    assert names == [f.name for f in FIELDS]
    defaults = {name: getattr(Settings(), name) for name in names}
    # exporter holds the resolved value: "auto" gives "file" when no OTLP endpoint is set.
    assert defaults == {f.name: f.default for f in FIELDS} | {"exporter": "file"}
