"""The logger's MLflow backend on a real file store: the scalars land at their steps; a store that
breaks mid-run (the run's folder removed) warns once, the logger goes on writing metrics.jsonl,
and the failures are counted at the end."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from nemo_rl.utils import logger_backends
from nemo_rl.utils.logger import Logger, LoggerConfig

pytestmark = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("mlflow") is None, reason="needs the mlflow extra"
)


def test_a_backend_that_fails_mid_run_warns_once_and_the_logger_goes_on(
    tmp_path, caplog, monkeypatch
):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    cfg = LoggerConfig(log_dir=str(tmp_path), tqdm=False, mlflow={"enabled": True})
    backends = logger_backends.start(cfg, {"a.b": 1})
    try:
        (mlflow,) = backends.backends
        logger = Logger(cfg, total_steps=4, backends=backends)
        logger.log({"loss": 1.5}, step=0, prefix="train")
        client = MlflowClient((tmp_path / "mlruns").as_uri())
        assert [
            (m.step, m.value) for m in client.get_metric_history(mlflow.run_id, "train/loss")
        ] == [(0, 1.5)]
        shutil.rmtree(tmp_path / "mlruns" / mlflow.experiment_id / mlflow.run_id)
        with caplog.at_level(logging.WARNING, logger="nemo_rl.logger"):
            for step in (1, 2, 3):
                logger.log({"loss": 1.0 / step}, step=step, prefix="train")
            logger.close()
            backends.finish("FINISHED")
    finally:
        logger_backends.finish()
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("logger.mlflow: writing failed" in w for w in warnings) == 1, warnings
    assert any("logger.mlflow: " in w and "writes failed during the run" in w for w in warnings)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
