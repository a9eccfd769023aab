"""The GenAI semantic conventions as we emit them, held against the
``opentelemetry-semantic-conventions`` package, so a drift fails CI: attribute and metric names,
units and instrument kinds from the package's constants and ``create_*`` functions; the advised
histogram buckets (the conventions' text, which the package does not carry) reach the SDK; the
old ``gen_ai.system`` only under ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai/dup``."""

from __future__ import annotations

import warnings

import pytest
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as attrs
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

import spanspec
from nemo_rl.telemetry.genai import emits_old_names, provider_attributes
from spanspec import metrics

# Advised bucket boundaries, from the GenAI metrics conventions (gen-ai-metrics.md):
# gen_ai.client.operation.duration (seconds) and gen_ai.client.token.usage (tokens).
ADVISED = {
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION: (
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ),
    gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE: (
        1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
        67108864,
    ),
}  # fmt: skip
CREATE = {
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION: (
        gen_ai_metrics.create_gen_ai_client_operation_duration
    ),
    gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE: gen_ai_metrics.create_gen_ai_client_token_usage,
}
GENAI_SPANS = ("rl.worker.generate", "rl.vllm.generate", "rl.vllm.generate_text")


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


def test_our_attribute_names_are_the_conventions(spec):
    for name in (
        attrs.GEN_AI_PROVIDER_NAME,
        attrs.GEN_AI_OPERATION_NAME,
        attrs.GEN_AI_REQUEST_MODEL,
        attrs.GEN_AI_REQUEST_MAX_TOKENS,
        attrs.GEN_AI_REQUEST_TEMPERATURE,
        attrs.GEN_AI_USAGE_INPUT_TOKENS,
        attrs.GEN_AI_USAGE_OUTPUT_TOKENS,
        attrs.GEN_AI_TOKEN_TYPE,
        attrs.GEN_AI_SYSTEM,
    ):
        assert name in spec.attributes, name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        token_types = {v.value for v in attrs.GenAiTokenTypeValues}
        operations = {v.value for v in attrs.GenAiOperationNameValues}
    assert set(spec.attributes[attrs.GEN_AI_TOKEN_TYPE].allowed) <= token_types
    assert set(spec.attributes[attrs.GEN_AI_OPERATION_NAME].allowed) <= operations


def test_generation_spans_require_what_the_conventions_require(spec):
    for name in GENAI_SPANS:
        entry = spec.spans[name]
        assert {attrs.GEN_AI_PROVIDER_NAME, attrs.GEN_AI_OPERATION_NAME} <= entry.required, name
        assert entry.requirements[attrs.GEN_AI_SYSTEM] == "opt_in", name


@pytest.mark.parametrize("name", sorted(ADVISED))
def test_metric_name_unit_kind_and_buckets_match_the_package(spec, name):
    ours = spec.metrics[name]
    theirs = CREATE[name](MeterProvider().get_meter("semconv"))
    assert isinstance(theirs, Histogram) and ours.instrument == "histogram"
    assert ours.unit == theirs.unit
    assert ours.buckets == pytest.approx(ADVISED[name])
    required = {attrs.GEN_AI_PROVIDER_NAME, attrs.GEN_AI_OPERATION_NAME}
    if name == gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE:
        required.add(attrs.GEN_AI_TOKEN_TYPE)
    assert required <= set(ours.attributes)


def test_the_advised_buckets_reach_the_sdk(spec):
    reader = InMemoryMetricReader()
    metrics.bind(spec, MeterProvider(metric_readers=[reader]))
    try:
        metrics.record(gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, 10, {"gen_ai.token.type": "input"})
        metrics.span_ended("rl.worker.generate", 0, 50_000_000, provider_attributes("torch"))
        got = {
            m.name: tuple(m.data.data_points[0].explicit_bounds)
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
    finally:
        metrics.unbind()
    for name, bounds in ADVISED.items():
        assert got[name] == pytest.approx(bounds), name


@pytest.mark.parametrize(
    ("opt_in", "old"),
    [
        (None, False),
        ("", False),
        ("gen_ai_latest_experimental", False),
        ("http", False),
        ("http/dup, gen_ai/dup", True),
        ("gen_ai/dup", True),
    ],
)
def test_the_old_name_only_while_the_opt_in_asks_for_it(opt_in, old):
    env = {} if opt_in is None else {"OTEL_SEMCONV_STABILITY_OPT_IN": opt_in}
    assert emits_old_names(env) is old
    want = {attrs.GEN_AI_PROVIDER_NAME: "vllm"} | ({attrs.GEN_AI_SYSTEM: "vllm"} if old else {})
    assert provider_attributes("vllm", env) == want
