"""Where else the logger's scalars go: TensorBoard, MLflow and Weights & Biases.

Each is an optional extra (``pip install 'nemo-rl-otel[tensorboard]'``, ``[mlflow]``,
``[wandb]``), off by default and on with one key under ``logger:`` (``logger.mlflow.enabled=true``).
Every backend gets the same scalars the logger writes to ``metrics.jsonl`` (``train/loss``,
``validation/accuracy``, ``timing/...``) at the step they belong to.

- :func:`check` (run by the config's validation, before Ray or telemetry starts): a backend
  that is not installed, or whose settings cannot work, is one :class:`BackendError` naming the
  key and the fix.
- :func:`start` (the entry point, still before Ray): opens each enabled backend (an MLflow run
  with the flattened config as params, a W&B run) and returns :class:`Backends`, whose
  ``resource`` (``mlflow.run_id``, ``wandb.run_id``) goes on the OpenTelemetry resource, so a
  trace found in a backend leads to the run. A backend that cannot start (a server that does not
  answer) is a :class:`BackendError` too.
- :meth:`Backends.log` (the :class:`~nemo_rl.utils.logger.Logger`, every ``log`` call): a
  backend that fails mid-run warns once and training goes on; the failures are counted and said
  at :meth:`Backends.finish`.

The started backends are this process's (:func:`active`), like its telemetry handle: the entry
point starts them, every logger the loop opens writes to them, the entry point finishes them.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "Backend",
    "BackendError",
    "Backends",
    "active",
    "check",
    "finish",
    "flatten",
    "problem",
    "start",
]

_log = logging.getLogger("nemo_rl.logger")
_INSTALL = "pip install 'nemo-rl-otel[{extra}]'"
# What a tracking URI may start with; anything else is a typo MLflow would report much later.
_MLFLOW_SCHEMES = ("file:", "sqlite:", "http:", "https:", "databricks", "postgresql", "mysql")


class BackendError(ValueError):
    """A logger backend that cannot start: ``key`` (``logger.mlflow.tracking_uri``) and why."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def problem(section: str, cfg: Any) -> str | None:
    """What keeps backend ``section`` (``tensorboard``, ``mlflow``, ``wandb``) with settings
    ``cfg`` from starting, found without starting it (not installed, a tracking URI of no scheme
    MLflow knows), or None. The config's validation says it as ``logger.<section>: ...``."""
    if not cfg.enabled:
        return None
    module = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}[section]
    if not _installed(module):
        name = {"tensorboard": "TensorBoard", "mlflow": "MLflow", "wandb": "wandb"}[section]
        return f"{name} is not installed; install it with " + _INSTALL.format(extra=section)
    uri = getattr(cfg, "tracking_uri", None)
    if section == "mlflow" and uri:
        if not (uri.startswith(_MLFLOW_SCHEMES) or uri.startswith("/")):
            return (
                f"tracking_uri {uri!r} is not a tracking URI: expected a folder (file:///abs/mlruns "
                "or /abs/mlruns), sqlite:///path.db or http(s)://host:port of an mlflow server"
            )
        if uri.startswith("sqlite:") and not _installed("sqlalchemy"):
            return (
                "an sqlite:// store needs SQLAlchemy and Alembic (pip install sqlalchemy alembic)"
            )
    return None


def check(cfg: Any) -> None:
    """Check every backend of ``cfg`` (a ``LoggerConfig``) without starting anything.

    Raises:
        BackendError: for the first backend :func:`problem` finds fault with.
    """
    for section in ("tensorboard", "mlflow", "wandb"):
        found = problem(section, getattr(cfg, section))
        if found:
            raise BackendError(f"logger.{section}", found)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"grpo": {"max_steps": 3}}`` -> ``{"grpo.max_steps": 3}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _scalars(metrics: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    """``(prefix/key, value)`` for every finite number in ``metrics`` (the logger's rule)."""
    for key, value in metrics.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            yield f"{prefix}/{key}", float(value)


class Backend:
    """One place the scalars go. Subclasses open in ``__init__`` (raising :class:`BackendError`)
    and write in :meth:`write`; failures there are counted by :class:`Backends`."""

    key = "logger"
    resource_attribute: str | None = None
    """The OpenTelemetry resource attribute that carries this backend's run id, if any."""
    run_id: str | None = None

    def write(self, scalars: list[tuple[str, float]], step: int) -> None:
        raise NotImplementedError

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Attach ``tags`` (the run id, the trace file) to the backend's run, where it has one."""

    def flush(self) -> None:
        """Make what was written readable now."""

    def where(self) -> str:
        """One line: where this backend wrote, and how to look."""
        raise NotImplementedError

    def close(self, status: str) -> None:
        """End the backend's run with ``status``: FINISHED, FAILED or KILLED."""


class TensorBoardBackend(Backend):
    """Event files under ``logger.tensorboard.log_dir`` (default ``<logger.log_dir>/tensorboard``),
    written by ``torch.utils.tensorboard``."""

    key = "logger.tensorboard"

    def __init__(self, cfg: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = cfg.tensorboard.log_dir or os.path.join(cfg.log_dir, "tensorboard")
        try:
            self._writer = SummaryWriter(log_dir=self.log_dir)
        except OSError as exc:
            raise BackendError(
                "logger.tensorboard.log_dir", f"cannot write {self.log_dir}: {exc.strerror}"
            ) from None

    def write(self, scalars: list[tuple[str, float]], step: int) -> None:
        for tag, value in scalars:
            self._writer.add_scalar(tag, value, global_step=step)

    def flush(self) -> None:
        self._writer.flush()

    def where(self) -> str:
        return f"tensorboard: {self.log_dir}  (tensorboard --logdir {self.log_dir})"

    def close(self, status: str) -> None:
        self._writer.close()


class MlflowBackend(Backend):
    """An MLflow run in ``logger.mlflow.experiment``: the flattened config as params, each step's
    scalars as metrics at that step; the run id goes on the OpenTelemetry resource."""

    key = "logger.mlflow"
    resource_attribute = "mlflow.run_id"

    def __init__(self, cfg: Any, params: Mapping[str, Any]) -> None:
        # A server that stops answering must not hold training for MLflow's default of minutes
        # of retries: a few short tries, unless the user chose otherwise.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        m = cfg.mlflow
        uri = m.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        if uri is None:
            uri = Path(cfg.log_dir, "mlruns").resolve().as_uri()
        if uri.startswith("/"):
            uri = Path(uri).as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its folder store in maintenance; asked for by name, it is what we use.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if uri.startswith(("http:", "https:")):
            _reachable(uri)
        from mlflow import MlflowClient
        from mlflow.entities import Param

        self.uri = uri
        self._client = MlflowClient(tracking_uri=uri)
        try:
            found = self._client.get_experiment_by_name(m.experiment)
            experiment_id = (
                found.experiment_id if found else self._client.create_experiment(m.experiment)
            )
            run = self._client.create_run(experiment_id, run_name=m.run_name)
            self.run_id = run.info.run_id
            self.experiment_id = experiment_id
            items = [Param(k, str(v)[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):  # MLflow takes 100 params a batch
                self._client.log_batch(self.run_id, params=items[i : i + 100])
        except Exception as exc:  # MlflowException, OSError: the key and what MLflow said
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BackendError("logger.mlflow.tracking_uri", f"{uri}: {first}") from None

    def write(self, scalars: list[tuple[str, float]], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in scalars])

    def where(self) -> str:
        return f"mlflow: run {self.run_id} in experiment {self.experiment_id} at {self.uri}"

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self._client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def close(self, status: str) -> None:
        self._client.set_terminated(self.run_id, status=status)


def _reachable(uri: str) -> None:
    """Raise :class:`BackendError` unless an MLflow server answers at ``uri`` within 5 s."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
            response.read()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BackendError(
            "logger.mlflow.tracking_uri",
            f"no MLflow server answers at {uri} ({reason}); start one (mlflow server --host "
            "127.0.0.1 --port 5000) or fix the URI",
        ) from None


class WandbBackend(Backend):
    """A W&B run in ``logger.wandb.project`` (``mode: offline`` writes ``<logger.log_dir>/wandb``
    and needs no network); its id goes on the OpenTelemetry resource."""

    key = "logger.wandb"
    resource_attribute = "wandb.run_id"

    def __init__(self, cfg: Any, params: Mapping[str, Any]) -> None:
        import wandb

        os.makedirs(cfg.log_dir, exist_ok=True)
        try:
            self._run = wandb.init(
                project=cfg.wandb.project,
                mode=cfg.wandb.mode,
                dir=cfg.log_dir,
                config=dict(params),
                reinit="finish_previous",
                settings=wandb.Settings(silent=True),  # the run's own summary is ours
            )
        except Exception as exc:  # wandb's own errors: login needed, bad mode
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BackendError("logger.wandb", first) from None
        self.run_id = self._run.id
        self.folder = self._run.dir

    def write(self, scalars: list[tuple[str, float]], step: int) -> None:
        self._run.log(dict(scalars), step=step)

    def where(self) -> str:
        return f"wandb: run {self.run_id} in {self.folder}"

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._run.config.update(dict(tags), allow_val_change=True)

    def close(self, status: str) -> None:
        self._run.finish(exit_code=0 if status == "FINISHED" else 1)


class Backends:
    """The started backends of this process: one call writes a ``log`` call's scalars to each."""

    def __init__(self, backends: list[Backend]) -> None:
        self.backends = backends
        self._failures: dict[str, int] = {}
        self._finished = False

    @property
    def resource(self) -> dict[str, str]:
        """OpenTelemetry resource attributes naming each backend's run (``mlflow.run_id``)."""
        return {
            b.resource_attribute: b.run_id
            for b in self.backends
            if b.resource_attribute and b.run_id
        }

    def log(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        """Write ``metrics`` at ``step`` under ``prefix`` to every backend. Never raises."""
        scalars = list(_scalars(metrics, prefix))
        if scalars:
            self._each("write", scalars, step)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Attach ``tags`` to each backend's run. Never raises."""
        self._each("set_tags", tags)

    def flush(self) -> None:
        """Make what was written readable now (TensorBoard's event file). Never raises."""
        self._each("flush")

    def where(self) -> list[str]:
        """One line per backend: where it wrote, and how to look."""
        return [b.where() for b in self.backends]

    def _each(self, method: str, *args: Any) -> None:
        for backend in self.backends:
            try:
                getattr(backend, method)(*args)
            except Exception as exc:
                count = self._failures.get(backend.key, 0)
                self._failures[backend.key] = count + 1
                if not count:
                    _log.warning(
                        "%s: writing failed (%s: %s); training goes on, further failures are "
                        "counted",
                        backend.key,
                        type(exc).__name__,
                        exc,
                    )

    def finish(self, status: str = "FINISHED") -> None:
        """End every backend's run with ``status`` (once); says how many writes failed."""
        if self._finished:
            return
        self._finished = True
        self._each("close", status)
        for key, count in self._failures.items():
            _log.warning("%s: %d writes failed during the run", key, count)


_active: Backends | None = None


def start(cfg: Any, params: Mapping[str, Any]) -> Backends:
    """Open every backend ``cfg`` (a ``LoggerConfig``) enables; ``params`` is the run's flattened
    config. They become this process's :func:`active` backends.

    Raises:
        BackendError: a backend that cannot start (not installed, a server that does not answer,
            a folder that cannot be written), naming its key; those already open are ended.
    """
    global _active
    check(cfg)
    opened: list[Backend] = []
    try:
        if cfg.tensorboard.enabled:
            opened.append(TensorBoardBackend(cfg))
        if cfg.mlflow.enabled:
            opened.append(MlflowBackend(cfg, params))
        if cfg.wandb.enabled:
            opened.append(WandbBackend(cfg, params))
    except BackendError:
        Backends(opened).finish("FAILED")
        raise
    _active = Backends(opened)
    return _active


def active() -> Backends:
    """This process's started backends (none before :func:`start`)."""
    return _active if _active is not None else Backends([])


def finish(status: str = "FINISHED") -> None:
    """End this process's backends (see :meth:`Backends.finish`); later loggers write nowhere."""
    global _active
    if _active is not None:
        _active.finish(status)
        _active = None
