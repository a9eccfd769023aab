"""``TelemetryCallback``: nemo_rl's telemetry in a TRL (or ``transformers``) trainer, one line.

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., callbacks=[TelemetryCallback()])

At ``on_train_begin`` the callback reads the settings (``NEMO_RL_OTEL_*`` over the optional
:class:`~nemo_rl.telemetry.TelemetryConfig` over the defaults, as a nemo_rl run does), starts
telemetry with :func:`~nemo_rl.telemetry.init_telemetry_driver` (files under
``<output_dir>/telemetry`` by default), opens the job span, and wraps the trainer's phase methods
(:mod:`nemo_rl.integrations.trl.phases`). The step spans follow the trainer's callbacks; the
logged scalars go to the registry's metrics (``on_log``, the logger tee of nemo_rl's loops). At
``on_train_end`` it closes the job, flushes, and prints where the step time went.

Off (``NEMO_RL_OTEL_ENABLED=false``), or without the OpenTelemetry SDK, nothing is wrapped: every
hook returns after one test. A bad setting or a trainer this callback does not know is one
warning line and no telemetry; training is never stopped by telemetry.
"""

from __future__ import annotations

import atexit
import logging
import sys
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from nemo_rl.integrations.trl.phases import ALGORITHMS, Guard, TrainerPhases, algorithm_of
from nemo_rl.telemetry import (
    RunIdentity,
    TelemetryConfig,
    init_telemetry_driver,
    job_cost,
    record_metrics,
    shutdown_telemetry,
)

__all__ = ["TelemetryCallback"]

_log = logging.getLogger("nemo_rl.integrations.trl")


class TelemetryCallback(TrainerCallback):
    """Traces a TRL trainer's run with the registry's ``rl.<algo>.*`` spans and metrics.

    Args:
        config: the ``telemetry:`` settings as a nemo_rl run config holds them; env variables
            (``NEMO_RL_OTEL_ENABLED``, ``_EXPORTER``, ``_SPAN_GROUPS``, ``_FILE_DIR``, ...) win
            over it, as in every nemo_rl run.
        algorithm: the registry algorithm (``grpo``, ``dpo``, ``sft``, ``rm``) for a trainer
            whose class does not say (default: from the trainer's TRL class).
        summary: print the step breakdown and the telemetry cost at the end (rank 0).
    """

    def __init__(
        self,
        config: TelemetryConfig | Mapping[str, Any] | None = None,
        *,
        algorithm: str | None = None,
        summary: bool = True,
    ) -> None:
        self._config = config
        self._algorithm = algorithm
        self._summary = summary
        self._guard = Guard()
        self._phases: TrainerPhases | None = None
        self._settings: Any = None
        self._tokens_seen = 0.0
        self._logger: Any = None
        self._run_dir = ""
        self._max_steps = 0
        self._started = False  # telemetry started by this callback, to be shut down by it

    @property
    def phases(self) -> TrainerPhases | None:
        """The trainer's phase tracer while telemetry runs, else None."""
        return self._phases

    # -- start and end ----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Starts telemetry, opens the job span and wraps the trainer's phase methods."""
        if self._phases is not None:  # train() called again on the same trainer
            return
        if int(getattr(args, "world_size", 1)) > 1 and not state.is_world_process_zero:
            return  # several processes: the main one is traced (a lane per rank is not done)
        trainer = _find_trainer(self)
        if trainer is None:
            _log.warning("telemetry: off: the trainer this callback was given to was not found")
            return
        self._guard.call("starting telemetry", self._start, trainer, args, state)

    def _start(self, trainer: Any, args: Any, state: Any) -> None:
        algorithm = self._algorithm or algorithm_of(trainer)
        if algorithm not in ALGORITHMS.values():
            known = ", ".join(ALGORITHMS)
            _log.warning(
                "telemetry: off: %s is not a trainer this callback knows (%s, or "
                "TelemetryCallback(algorithm=...) with one of %s)",
                type(trainer).__name__,
                known,
                ", ".join(ALGORITHMS.values()),
            )
            return
        config = _config(self._config)
        if config is None:
            return
        from nemo_rl.algorithms.task import RunInputs
        from nemo_rl.models.causal_lm import parameter_count
        from nemo_rl.models.pretrained import model_label
        from spanspec.findings import SpecError
        from spanspec.settings import SettingsError

        model = trainer.model
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        label = model_label(name) if name else type(model).__name__
        inputs = RunInputs(
            label,
            parameter_count(model),
            _size(trainer.train_dataset),
            _size(trainer.eval_dataset),
        )
        identity = RunIdentity(
            algorithm=algorithm,
            model=label,
            run_dir=str(args.output_dir),
            max_steps=int(state.max_steps),
            inputs=inputs.attributes(),
        )
        try:
            handle = init_telemetry_driver(config, identity)
        except (SettingsError, SpecError) as exc:
            _log.warning("telemetry: off: %s", _one_line(exc))
            return
        except OSError as exc:
            _log.warning("telemetry: off: cannot write %s: %s", exc.filename or "", exc.strerror)
            return
        if not handle.is_exporting:
            shutdown_telemetry()
            return
        self._settings, self._started = handle.settings, True
        self._run_dir, self._max_steps = str(args.output_dir), int(state.max_steps)
        atexit.register(self._end)  # a run that raised still ends its spans and flushes
        if state.is_world_process_zero:
            print(f"telemetry: {handle.destinations()}", flush=True)
            print(
                f"model: {label} ({inputs.num_parameters} parameters), data: "
                f"{inputs.train_examples} train / {inputs.val_examples} eval examples",
                flush=True,
            )
        phases = TrainerPhases(trainer, algorithm, self._guard, label)
        phases.spans.open("job", _job_span(algorithm, identity.job_attributes(handle.settings)))
        missing = phases.install()
        if missing:
            _log.warning(
                "telemetry: TRL %s's %s lacks %s: not traced; the other phases are",
                _trl_version(),
                type(trainer).__name__,
                ", ".join(missing),
            )
        self._phases = phases

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Closes every span, flushes and prints where the step time went (rank 0)."""
        if not self._started:
            return
        stats = self._guard.call("ending telemetry", self._end)
        if self._summary and state.is_world_process_zero:
            self._guard.call("the step summary", self._print_summary, args, stats)

    def _end(self) -> Any:
        phases, self._phases = self._phases, None
        started, self._started = self._started, False
        if phases is not None:
            phases.spans.close_all()
        logger, self._logger = self._logger, None
        if logger is not None:
            logger.close()
        return shutdown_telemetry() if started else None

    def _print_summary(self, args: Any, stats: Any) -> None:
        from nemo_rl.telemetry.breakdown import steps_done_lines
        from nemo_rl.telemetry.config import STRAGGLER_THRESHOLD

        settings = self._settings
        if stats is not None:
            print(job_cost(stats).line())
        threshold = settings.extra.get("straggler_threshold", STRAGGLER_THRESHOLD.default)
        for line in steps_done_lines(settings, str(args.output_dir), threshold):
            print(line)
        sys.stdout.flush()

    # -- steps ------------------------------------------------------------------------------

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Opens ``rl.<algo>.step`` numbered from 1 (``global_step`` + 1)."""
        if self._phases is not None:
            self._guard.call("opening a step", self._phases.open_step, state.global_step + 1)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Closes the step's ``rl.<algo>.policy_update``: the optimiser has stepped."""
        if self._phases is not None:
            self._guard.call("closing a policy update", self._phases.close_update)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Closes the step when the trainer has no ``_maybe_log_save_evaluate`` to close it
        after the step's logging, evaluation and checkpoint."""
        phases = self._phases
        if phases is not None and "_maybe_log_save_evaluate" not in vars(phases.trainer):
            self._guard.call("closing a step", phases.close_step)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        """The logger tee: TRL's logged scalars go through nemo_rl's logger, as a loop's do: to
        ``<output_dir>/metrics.jsonl`` and the registry's metrics (``train/<key>``, and
        ``validation/<key>`` for TRL's ``eval_<key>``, through each metric's ``from:`` keys)."""
        # The run's closing summary (train_runtime, train_loss) is no step's scalars.
        if self._phases is not None and logs and "train_runtime" not in logs:
            self._guard.call("recording logged metrics", self._tee, logs, state.global_step)

    def _tee(self, logs: Mapping[str, Any], step: int) -> None:
        train: dict[str, float] = {}
        validation: dict[str, float] = {}
        for key, value in logs.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or key == "num_tokens":
                continue
            if key.startswith("eval_"):  # TRL's evaluation keys: validation/<key>
                validation[key.removeprefix("eval_")] = float(value)
            else:
                train[key] = float(value)
        seen = logs.get("num_tokens")
        if isinstance(seen, int | float):  # TRL logs the tokens seen so far; the counter adds
            train["num_tokens"] = float(seen) - self._tokens_seen
            self._tokens_seen = float(seen)
        if self._logger is None:
            from nemo_rl.utils.logger import Logger, LoggerConfig

            # nemo_rl's logger: <output_dir>/metrics.jsonl (the report's curves) and the
            # registry's metrics through the same tee as nemo_rl's loops.
            config = LoggerConfig(log_dir=self._run_dir, tqdm=False)
            self._logger = Logger(config, self._max_steps, sinks=(record_metrics,))
        for prefix, scalars in (("train", train), ("validation", validation)):
            if scalars:
                self._logger.log(scalars, step, prefix)
        entry = self._phases.spans.find("step") if self._phases is not None else None
        if entry is not None and "loss" in train:
            import spanspec

            shown = [f"{k} {train[k]:.4g}" for k in ("reward", "loss") if k in train]
            spanspec.annotate(entry.span, **{"output.value": ", ".join(shown)})


def _job_span(algorithm: str, attributes: dict[str, Any]) -> Any:
    import spanspec

    return spanspec.span(f"rl.{algorithm}.job", **attributes)


def _config(given: TelemetryConfig | Mapping[str, Any] | None) -> TelemetryConfig | None:
    """The settings block as given (a mapping is validated), or None (warned) when it is bad."""
    if isinstance(given, TelemetryConfig):
        return given
    try:
        return TelemetryConfig(**dict(given or {}))
    except ValueError as exc:
        _log.warning("telemetry: off: %s", _one_line(exc))
        return None


def _find_trainer(callback: TelemetryCallback) -> Any:
    """The trainer whose callbacks hold ``callback``: the ``self`` of a frame calling us
    (``on_train_begin`` runs inside ``Trainer.train``). TrainerCallback is given no trainer, and
    the phases are only found on it."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        handler = getattr(candidate, "callback_handler", None)
        if handler is not None and any(c is callback for c in getattr(handler, "callbacks", ())):
            return candidate
        frame = frame.f_back
    return None


def _size(dataset: Any) -> int:
    if isinstance(dataset, dict):
        return sum(_size(d) for d in dataset.values())
    try:
        return len(dataset) if dataset is not None else 0
    except TypeError:  # an iterable dataset
        return 0


def _one_line(exc: BaseException) -> str:
    problems = getattr(exc, "problems", None)
    text = "; ".join(problems) if problems else str(exc)
    return " ".join(text.split())


def _trl_version() -> str:
    try:
        from importlib.metadata import version

        return version("trl")
    except Exception:
        return "(unknown version)"
