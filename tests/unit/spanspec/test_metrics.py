"""Metrics: registry instruments fed from logger dicts, from code, and from span durations."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import spanspec
from spanspec import metrics


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


@pytest.fixture
def reader(spec):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    metrics.bind(spec, provider)
    yield reader
    metrics.unbind()
    provider.shutdown()


def points(reader) -> dict[str, list]:
    data = reader.get_metrics_data()
    out: dict[str, list] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def test_logger_keys_feed_their_declared_metrics(reader):
    recorded = metrics.record_metrics(
        {"loss": 0.25, "reward_mean": 0.75, "grad_norm": 3, "num_tokens": 100, "not_a_metric": 1.0},
        prefix="train",
    )
    assert recorded == 4
    got = points(reader)
    assert got["rl.policy.loss"][0].value == 0.25
    assert got["rl.reward.mean"][0].value == 0.75
    assert got["rl.grad_norm"][0].value == 3
    assert got["rl.tokens"][0].value == 100
    assert "not_a_metric" not in got


def test_unprefixed_keys_and_first_present_wins(reader):
    metrics.record_metrics({"train/reward": 2.0, "train/reward_mean": 1.0})
    metrics.record_metrics({"validation/accuracy": 0.5})
    got = points(reader)
    assert got["rl.reward.mean"][0].value == 1.0
    assert got["rl.validation.accuracy"][0].value == 0.5


def test_prefix_scopes_keys(reader):
    assert metrics.record_metrics({"loss": 1.0}, prefix="validation") == 0


def test_counters_accumulate_and_up_down_counters_go_both_ways(reader):
    for _ in range(3):
        metrics.record_metrics({"num_tokens": 10}, prefix="train/")
    metrics.record_metrics({"async/queue_delta": 5})
    metrics.record_metrics({"async/queue_delta": -2})
    got = points(reader)
    assert got["rl.tokens"][0].value == 30
    assert got["rl.async.queue_size"][0].value == 3


def test_skipped_values_are_counted_and_warned_once(reader, caplog):
    caplog.set_level(logging.WARNING, logger="spanspec.metrics")
    for value in ("high", [1, 2], float("nan")):
        assert metrics.record_metrics({"loss": value}, prefix="train") == 0
    metrics.record_metrics({"num_tokens": -5}, prefix="train")
    assert metrics.skipped_counts() == {"rl.policy.loss": 3, "rl.tokens": 1}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "rl.policy.loss" in warnings[0] and "train/loss='high' (str)" in warnings[0]
    assert "counter cannot decrease" in warnings[1]


def test_numpy_and_tensor_like_scalars_are_numbers(reader):
    class OneElement:
        def __float__(self) -> float:
            return 0.5

    class Many:
        def __float__(self) -> float:
            raise TypeError("only one element tensors can be converted")

    assert metrics.record_metrics({"train/loss": OneElement()}) == 1
    assert metrics.record_metrics({"train/kl": Many()}) == 0
    assert metrics.skipped_counts() == {"rl.kl": 1}


def test_record_from_code_with_declared_attributes(reader, caplog):
    assert metrics.record("gen_ai.client.token.usage", 12, {"gen_ai.token.type": "input"})
    assert metrics.record("gen_ai.client.token.usage", 30, {"gen_ai.token.type": "output", "x": 1})
    assert not metrics.record("rl.not_declared", 1.0)
    got = points(reader)["gen_ai.client.token.usage"]
    by_type = {p.attributes["gen_ai.token.type"]: p for p in got}
    assert by_type["input"].sum == 12 and by_type["output"].sum == 30
    assert all(set(p.attributes) == {"gen_ai.token.type"} for p in got)
    assert any("not declared for it" in r.getMessage() for r in caplog.records)
    assert metrics.skipped_counts() == {"rl.not_declared": 1}


def test_span_durations_feed_the_histograms_that_name_them(reader):
    metrics.span_ended("rl.grpo.step", 0, 2_500_000_000)
    metrics.span_ended("rl.ppo.step", 0, 500_000_000)
    metrics.span_ended("rl.worker.generate", 0, 100_000_000, {"gen_ai.provider.name": "torch"})
    metrics.span_ended("rl.grpo.advantage", 0, 1)  # no histogram names it
    got = points(reader)
    (step,) = got["rl.step.duration"]
    assert step.count == 2 and step.sum == pytest.approx(3.0)
    assert got["gen_ai.client.operation.duration"][0].sum == pytest.approx(0.1)
    assert step.explicit_bounds[0] == metrics.DURATION_BUCKETS_S[0]


def test_nothing_is_recorded_or_raised_when_unbound():
    metrics.unbind()
    assert metrics.record_metrics({"train/loss": 1.0}) == 0
    assert metrics.record("gen_ai.client.token.usage", 1) is False
    metrics.span_ended("rl.grpo.step", 0, 1)
    assert metrics.skipped_counts() == {}
