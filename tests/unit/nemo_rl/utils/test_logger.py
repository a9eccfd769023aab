import json

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import spanspec
from nemo_rl.telemetry import record_metrics
from nemo_rl.utils.logger import Logger, LoggerConfig
from spanspec import metrics as spanspec_metrics


def test_jsonl_rows_and_the_opentelemetry_tee_as_a_sink(tmp_path):
    reader = InMemoryMetricReader()
    spanspec_metrics.bind(spanspec.load(), MeterProvider(metric_readers=[reader]))
    try:
        cfg = LoggerConfig(log_dir=str(tmp_path), tqdm=False)
        logger = Logger(cfg, total_steps=2, sinks=(record_metrics,))
        logger.log({"reward_mean": 0.5, "loss": 0.1, "bad": float("nan")}, step=1, prefix="train")
        logger.log({"rl.grpo.step": 0.2}, step=1, prefix="timing")
        logger.progress(1, reward=0.5, loss=0.1, step_time=0.2)
        logger.close()
        data = reader.get_metrics_data()
    finally:
        spanspec_metrics.unbind()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"step": 1, "train/reward_mean": 0.5, "train/loss": 0.1, "train/bad": None}
    assert rows[1] == {"step": 1, "timing/rl.grpo.step": 0.2}
    names = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert names["rl.reward.mean"].data.data_points[0].value == 0.5
    assert names["rl.policy.loss"].data.data_points[0].value == 0.1
