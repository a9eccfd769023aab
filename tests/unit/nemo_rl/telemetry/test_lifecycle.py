"""init_telemetry_driver / init_telemetry_worker / shutdown_telemetry, against the real SDK."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

import spanspec
from nemo_rl import telemetry
from nemo_rl.telemetry import RunIdentity, TelemetryConfig
from nemo_rl.utils.config import ConfigError
from spanspec import propagate
from spanspec.runtime import NOOP
from spanspec.settings import SettingsError


def config(**block) -> TelemetryConfig:
    return TelemetryConfig(**block)


def who(algorithm: str = "grpo", run_dir: Path | None = None) -> RunIdentity:
    return RunIdentity(algorithm, "tiny-gpt", str(run_dir) if run_dir else None, max_steps=3)


def spans_in(folder: Path) -> list[tuple[dict, dict]]:
    out = []
    for line in (folder / "traces.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {
                a["key"]: next(iter(a["value"].values())) for a in rs["resource"]["attributes"]
            }
            out.extend((s, resource) for ss in rs["scopeSpans"] for s in ss["spans"])
    return out


def test_driver_writes_settings_to_env_and_exports(tmp_path):
    handle = telemetry.init_telemetry_driver(
        config(span_groups="per_step", run_id="job1"), who("grpo")
    )
    assert handle.is_exporting and telemetry.get_telemetry() is handle
    assert os.environ["NEMO_RL_OTEL_SPAN_GROUPS"] == "per_step"
    assert os.environ["NEMO_RL_OTEL_RUN_ID"] == "job1"
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    assert folder == (tmp_path / "runs" / "job1" / "telemetry").resolve()
    resource_env = os.environ["OTEL_RESOURCE_ATTRIBUTES"]
    assert "rl.algorithm=grpo" in resource_env and "rl.model=tiny-gpt" in resource_env

    with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
        pass
    with spanspec.span("rl.grpo.checkpoint", **{"rl.iteration": 0}):
        pass
    stats = telemetry.shutdown_telemetry()
    assert stats is not None and stats.spans_exported == 2
    assert telemetry.shutdown_telemetry() is None and telemetry.get_telemetry() is None

    (span, resource), _ = spans_in(folder)
    assert span["name"] == "rl.grpo.step"
    assert resource["rl.algorithm"] == "grpo" and resource["rl.model"] == "tiny-gpt"
    assert resource["rl.run_id"] == "job1" and resource["rl.worker.group"] == "driver"
    assert {"host.name", "process.pid", "service.name"} <= set(resource)


def test_the_project_names_the_run_for_backends(clean_env, tmp_path):
    # Default: the run folder's name; on the resource as Phoenix's project and service.namespace,
    # for the driver's spans and (through the env) the workers'.
    run = config(run_id="job2", span_groups="per_step")
    settings = telemetry.resolve_settings(run, who(run_dir=tmp_path / "my_run"))
    assert (settings.project, settings.sources["project"]) == (
        "my_run",
        "default (the run folder's name)",
    )
    assert telemetry.resolve_settings(config(project="sweep-7")).project == "sweep-7"
    clean_env.setenv("NEMO_RL_OTEL_PROJECT", "from-env")
    assert telemetry.resolve_settings(config(project="sweep-7")).project == "from-env"
    clean_env.delenv("NEMO_RL_OTEL_PROJECT")
    telemetry.init_telemetry_driver(run, who(run_dir=tmp_path / "my_run"))
    assert "openinference.project.name=my_run" in os.environ["OTEL_RESOURCE_ATTRIBUTES"]
    assert os.environ["NEMO_RL_OTEL_PROJECT"] == "my_run"
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
        pass
    telemetry.shutdown_telemetry()
    ((_, resource),) = spans_in(tmp_path / "my_run" / "telemetry")
    assert resource["openinference.project.name"] == resource["service.namespace"] == "my_run"


def test_raw_env_beats_yaml_and_is_not_overwritten(clean_env):
    clean_env.setenv("NEMO_RL_OTEL_SPAN_GROUPS", "all")
    clean_env.setenv("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
    clean_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "rl.model=from-env,team=rl")
    handle = telemetry.init_telemetry_driver(config(span_groups="per_step"), who("ppo"))
    assert handle.settings.span_groups == "all"
    assert handle.settings.sources["span_groups"] == "env NEMO_RL_OTEL_SPAN_GROUPS"
    assert handle.settings.export_strategy == "all_ranks"
    assert handle.settings.sources["export_strategy"] == "env NEMO_LENS_EXPORT_STRATEGY"
    assert os.environ["NEMO_RL_OTEL_SPAN_GROUPS"] == "all"
    assert os.environ["NEMO_RL_OTEL_EXPORT_STRATEGY"] == "all_ranks"
    resource = os.environ["OTEL_RESOURCE_ATTRIBUTES"]
    assert resource.startswith("rl.model=from-env,team=rl,") and "tiny-gpt" not in resource
    assert handle.resource.attributes["team"] == "rl"


def test_run_id_is_explicit_else_slurm_else_random(clean_env):
    handle = telemetry.init_telemetry_driver(config(), who("sft"))
    assert re.fullmatch(r"[0-9a-f]{12}", handle.settings.run_id)
    assert handle.settings.sources["run_id"] == "generated"
    telemetry.shutdown_telemetry()

    for key in [k for k in os.environ if k.startswith(("NEMO_RL_OTEL_", "OTEL_RESOURCE"))]:
        clean_env.delenv(key)
    clean_env.setenv("SLURM_JOB_ID", "4242")
    handle = telemetry.init_telemetry_driver(config(), who("sft"))
    assert handle.settings.run_id == "4242"
    assert handle.settings.sources["run_id"] == "env SLURM_JOB_ID"
    assert handle.resource.attributes["slurm.job.id"] == "4242"
    telemetry.shutdown_telemetry()

    for key in [k for k in os.environ if k.startswith(("NEMO_RL_OTEL_", "OTEL_RESOURCE"))]:
        clean_env.delenv(key)
    handle = telemetry.init_telemetry_driver(config(run_id="mine"), who("sft"))
    assert handle.settings.run_id == "mine"


def test_driver_init_is_idempotent_and_logs_the_settings(caplog):
    caplog.set_level(logging.INFO, logger="nemo_rl.telemetry")
    first = telemetry.init_telemetry_driver(config(), who("grpo"))
    assert telemetry.init_telemetry_driver(config(span_groups="all"), who("grpo")) is first
    (record,) = [r for r in caplog.records if "telemetry:" in r.getMessage()]
    assert "span_groups" in record.getMessage() and "default" in record.getMessage()


def test_a_nemo_lens_variable_we_do_not_read_is_named_once(clean_env, caplog):
    clean_env.setenv("NEMO_LENS_SAMPLER_ENABLED", "1")
    clean_env.setenv("NEMO_LENS_SPAN_GROUPS", "all")  # one we read: not named
    caplog.set_level(logging.WARNING, logger="nemo_rl.telemetry")
    telemetry.init_telemetry_driver(config(), who("grpo"))
    (record,) = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert record.getMessage().startswith("telemetry: NEMO_LENS_SAMPLER_ENABLED: not a setting")


@pytest.mark.parametrize(
    ("env", "block", "error", "match"),
    [
        ({}, {"exporterr": "file"}, ConfigError, "did you mean 'exporter'"),
        ({"NEMO_RL_OTEL_ENABLED": "maybe"}, {}, SettingsError, "NEMO_RL_OTEL_ENABLED='maybe'"),
        (
            {},
            {"span_groups": "per_stpe"},
            SettingsError,
            "telemetry.span_groups='per_stpe': unknown group",
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, {"exporter": "otlp"}, SettingsError, "thrift"),
        (
            {"NEMO_RL_OTEL_SPAN_GROUP": "all"},
            {},
            SettingsError,
            "NEMO_RL_OTEL_SPAN_GROUP: unknown variable",
        ),
    ],
)
def test_configuration_errors_are_raised_on_the_driver_at_init(clean_env, env, block, error, match):
    for key, value in env.items():
        clean_env.setenv(key, value)
    before = dict(os.environ)
    with pytest.raises(error, match=match):
        telemetry.init_telemetry_driver(config(**block), who("grpo"))
    assert telemetry.get_telemetry() is None
    assert dict(os.environ) == before  # nothing half-applied for the workers to inherit


def test_one_identity_gives_the_resource_and_the_job_span(clean_env):
    identity = RunIdentity("rm", "tiny-rm", "logs/exp", max_steps=7)
    handle = telemetry.init_telemetry_driver(config(run_id="oc", user_id="alice"), identity)
    assert handle.settings.file_dir == str(Path("logs/exp/telemetry").resolve())
    assert handle.settings.project == "exp"
    resource = handle.resource.attributes
    job = identity.job_attributes(handle.settings)
    for key in ("rl.algorithm", "rl.model", "rl.run_id"):
        assert resource[key] == job[key]
    assert job == {
        "rl.algorithm": "rm",
        "rl.max_steps": 7,
        "rl.model": "tiny-rm",
        "rl.run_id": "oc",
        "enduser.id": "alice",  # the registry redacts it as the span is made
    }
    assert "enduser.id" not in resource


def test_sdk_disabled_switches_everything_off_and_tells_workers(clean_env):
    clean_env.setenv("OTEL_SDK_DISABLED", "true")
    handle = telemetry.init_telemetry_driver(config(), who("grpo"))
    assert not handle.is_exporting and not spanspec.runtime.is_active()
    assert os.environ["NEMO_RL_OTEL_ENABLED"] == "false"
    assert spanspec.span("rl.grpo.step", **{"rl.iteration": 0}) is NOOP


def test_non_exporting_worker_creates_no_spans_but_keeps_the_trace_context():
    telemetry.init_telemetry_driver(config(export_strategy="single_rank"), who("grpo"))
    telemetry.shutdown_telemetry()  # the env it wrote stays, as a Ray worker would inherit it
    handle = telemetry.init_telemetry_worker(rank=1, world_size=2, worker_group="policy")
    assert not handle.is_exporting and "single_rank" in handle.reason
    assert telemetry.init_telemetry_worker(1, 2, "policy") is handle
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with propagate.attached(carrier):
        assert spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": 0}) is NOOP
        assert propagate.inject()["traceparent"] == carrier["traceparent"]


def test_exporting_worker_joins_the_driver_trace():
    telemetry.init_telemetry_driver(config(span_groups="all", run_id="w"), who("grpo"))
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    with spanspec.span("rl.grpo.policy_update", **{"rl.iteration": 0}):
        carrier = propagate.inject()
    telemetry.shutdown_telemetry()

    handle = telemetry.init_telemetry_worker(rank=0, world_size=2, worker_group="policy")
    assert handle.is_exporting
    with propagate.attached(carrier):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": 0}):
            pass
    telemetry.shutdown_telemetry()
    by_name = {s["name"]: (s, r) for s, r in spans_in(folder)}
    update, _ = by_name["rl.grpo.policy_update"]
    micro, resource = by_name["rl.worker.train_microbatch"]
    assert micro["parentSpanId"] == update["spanId"] and micro["traceId"] == update["traceId"]
    assert resource["rl.worker.group"] == "policy" and resource["rl.worker.rank"] == "0"
    assert resource["rl.algorithm"] == "grpo" and resource["rl.run_id"] == "w"


def test_a_worker_without_the_drivers_env_stays_off():
    assert not telemetry.init_telemetry_worker(0, 1, "policy").is_exporting


def test_a_malformed_worker_env_turns_telemetry_off_without_raising(clean_env, caplog):
    clean_env.setenv("NEMO_RL_OTEL_RUN_ID", "x")
    clean_env.setenv("NEMO_RL_OTEL_EXPORTER", "kafka")
    handle = telemetry.init_telemetry_worker(0, 1, "policy")
    assert not handle.is_exporting
    assert any("NEMO_RL_OTEL_EXPORTER='kafka'" in r.getMessage() for r in caplog.records)


def test_record_metrics_and_token_usage_reach_the_files():
    telemetry.init_telemetry_driver(config(run_id="m"), who("grpo"))
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    assert telemetry.record_metrics({"loss": 0.5, "lr": 1e-4, "note": "text"}, prefix="train") == 2
    telemetry.record_token_usage(10, 20, provider="torch")
    telemetry.shutdown_telemetry()
    names = {
        m["name"]
        for line in (folder / "metrics.jsonl").read_text().splitlines()
        for rm in json.loads(line)["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
    }
    assert {"rl.policy.loss", "rl.learning_rate", "gen_ai.client.token.usage"} <= names


def test_nothing_raises_when_telemetry_never_started():
    assert telemetry.record_metrics({"train/loss": 1.0}) == 0
    telemetry.record_token_usage(1, 2)
    assert telemetry.shutdown_telemetry() is None


def test_traces_written_outside_the_run_folder_are_pointed_at_from_it(tmp_path):
    run, traces = tmp_path / "runs" / "mine", tmp_path / "scratch" / "tel"
    telemetry.init_telemetry_driver(config(run_id="r1", file_dir=str(traces)), who(run_dir=run))
    assert json.loads((run / "spanspec-run.json").read_text()) == {"traces": "../../scratch/tel"}
    assert json.loads((traces / "spanspec-run.json").read_text()) == {
        "runs": {"r1": "../../runs/mine"}
    }


def test_no_pointer_where_the_traces_are_in_the_run_folder(tmp_path):
    telemetry.init_telemetry_driver(config(run_id="r2"), who(run_dir=tmp_path / "run"))
    assert (tmp_path / "run" / "telemetry").is_dir()
    assert not list(tmp_path.rglob("spanspec-run.json"))


def test_a_pointer_that_cannot_be_written_is_one_warning_and_the_run_goes_on(tmp_path, caplog):
    run = tmp_path / "run"
    (run / "spanspec-run.json").mkdir(parents=True)  # a folder where the pointer goes
    traces = tmp_path / "tel"
    handle = telemetry.init_telemetry_driver(
        config(run_id="r3", file_dir=str(traces), span_groups="per_step"), who(run_dir=run)
    )
    assert handle.is_exporting
    (warning,) = [r.getMessage() for r in caplog.records if "run pointer" in r.getMessage()]
    assert f"cannot write the run pointer in {run} or {traces}" in warning
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}):
        pass
    assert telemetry.shutdown_telemetry().spans_exported == 1
