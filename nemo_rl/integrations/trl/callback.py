"""``TelemetryCallback``: nemo_rl's telemetry in a TRL (or ``transformers``) trainer, one line.

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., callbacks=[TelemetryCallback()])

At ``on_train_begin`` the callback reads the settings (``NEMO_RL_OTEL_*`` over the optional
:class:`~nemo_rl.telemetry.TelemetryConfig` over the defaults, as a nemo_rl run does), starts
telemetry with :func:`~nemo_rl.telemetry.init_telemetry_driver` (files under
``<output_dir>/telemetry`` by default), opens the job span, and wraps the trainer's phase methods
(:mod:`nemo_rl.integrations.trl.phases`). The step spans follow the trainer's callbacks; the
logged scalars go to the registry's metrics (``on_log``, the logger tee of nemo_rl's loops). At
``on_train_end`` it closes the job, flushes, and prints where the step time went.

Under ``accelerate launch`` or ``torchrun`` every rank traces, as rank N of the worker group
``trainer``, and a step is one trace across the ranks (:mod:`nemo_rl.integrations.trl.ranks`:
rank 0 decides the settings and the run id and holds the job and step spans; the others' phase
spans are children of rank 0's step).

Off (``NEMO_RL_OTEL_ENABLED=false``), or without the OpenTelemetry SDK, nothing is wrapped: every
hook returns after one test (and no rank sends anything to another). A bad setting or a trainer
this callback does not know is one warning line and no telemetry; training is never stopped by
telemetry.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from nemo_rl.integrations.trl import ranks as ranks_
from nemo_rl.integrations.trl.phases import ALGORITHMS, Guard, TrainerPhases, algorithm_of
from nemo_rl.telemetry import (
    RunIdentity,
    TelemetryConfig,
    init_telemetry_driver,
    init_telemetry_worker,
    job_cost,
    record_metrics,
    shutdown_telemetry,
)
from spanspec import propagate

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

    With several processes, the callback of each rank takes part in the ranks' agreement (the
    hooks run on every rank, in step): every rank must be given one.
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
        self._ranks: ranks_.Ranks | None = None  # several ranks traced: their collectives
        self._tee_logs = True  # the logger tee: rank 0's (TRL's logged scalars are the run's)

    @property
    def phases(self) -> TrainerPhases | None:
        """The trainer's phase tracer while telemetry runs, else None."""
        return self._phases

    # -- start and end ----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Starts telemetry, opens the job span and wraps the trainer's phase methods; with
        several ranks, every rank, agreed with the others."""
        if self._phases is not None or self._started:  # train() called again on this trainer
            return
        several = int(getattr(args, "world_size", 1)) > 1
        world = ranks_.world() if several else None
        if several and world is None and not state.is_world_process_zero:
            return  # several processes without torch.distributed: the main one is traced
        quiet = not state.is_world_process_zero  # one warning a run, not one a rank
        trainer = _find_trainer(self)
        if trainer is None:
            if not quiet:
                _log.warning("telemetry: off: the trainer this callback was given to was not found")
            return
        if world is None:
            self._guard.call("starting telemetry", self._start, trainer, args, state)
        else:
            self._guard.call(
                "starting telemetry on every rank", self._start_ranks, trainer, args, state, *world
            )

    def _start(
        self,
        trainer: Any,
        args: Any,
        state: Any,
        config: TelemetryConfig | None = None,
        world_size: int = 1,
    ) -> bool:
        """Starts telemetry in this process (rank 0 of ``world_size``); returns whether it
        exports."""
        algorithm = self._known(trainer, quiet=False)
        config = config or _config(self._config)
        if algorithm is None or config is None:
            return False
        from nemo_rl.algorithms.task import RunInputs
        from nemo_rl.models.causal_lm import parameter_count
        from spanspec.findings import SpecError
        from spanspec.settings import SettingsError

        model = trainer.model
        label = _model_label(model)
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
        # One process: the driver lane. Several: rank 0 of the trainer ranks, holding the job
        # and step spans (the other ranks join each step's trace).
        lane = {} if world_size == 1 else {"worker_group": ranks_.GROUP, "world_size": world_size}
        try:
            handle = init_telemetry_driver(config, identity, **lane)
        except (SettingsError, SpecError) as exc:
            _log.warning("telemetry: off: %s", _one_line(exc))
            return False
        except OSError as exc:
            _log.warning("telemetry: off: cannot write %s: %s", exc.filename or "", exc.strerror)
            return False
        if not handle.is_exporting:
            shutdown_telemetry()
            return False
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
        self._install(phases, quiet=False)
        return True

    def _known(self, trainer: Any, quiet: bool) -> str | None:
        """The registry algorithm of ``trainer``, or None (warned unless ``quiet``)."""
        algorithm = self._algorithm or algorithm_of(trainer)
        if algorithm in ALGORITHMS.values():
            return algorithm
        if not quiet:
            _log.warning(
                "telemetry: off: %s is not a trainer this callback knows (%s, or "
                "TelemetryCallback(algorithm=...) with one of %s)",
                type(trainer).__name__,
                ", ".join(ALGORITHMS),
                ", ".join(ALGORITHMS.values()),
            )
        return None

    def _install(self, phases: TrainerPhases, quiet: bool) -> None:
        tested = None if quiet else _untested_trl()
        if tested:
            # Not a stop: the phases are found by name, so a TRL that moved one loses that one
            # (named below), and the rest is traced as usual.
            _log.warning(
                "telemetry: TRL %s is outside the range this integration is tested with (%s, "
                "the trl extra); a phase whose method moved is named and left out, training goes "
                "on; `pip install 'trl%s'` for the tested one",
                _trl_version(),
                tested,
                tested,
            )
        missing = phases.install()
        if missing and not quiet:
            _log.warning(
                "telemetry: TRL %s's %s lacks %s: not traced; the other phases are",
                _trl_version(),
                type(phases.trainer).__name__,
                ", ".join(missing),
            )
        self._phases = phases

    # -- several ranks ------------------------------------------------------------------------

    def _start_ranks(self, trainer: Any, args: Any, state: Any, rank: int, size: int) -> None:
        """Every rank at once: rank 0 starts telemetry and sends the settings it resolved, the
        others start from them; if one rank could not, every rank goes off."""
        config = self._on_here(trainer, quiet=rank != 0)
        if config is None:  # off, or bad input: the same on every rank, decided without a word
            return
        ranks = ranks_.Ranks(rank, size)
        shared: dict[str, Any] | None = None
        started = False
        if ranks.is_first:
            started = bool(
                self._guard.call(
                    "starting telemetry", self._start, trainer, args, state, config, size
                )
            )
            if started:
                shared = self._guard.call("sharing the settings", self._shared_settings)
        shared = ranks.broadcast(shared)
        exporting = started
        if not ranks.is_first and shared is not None:
            exporting = self._guard.call(
                "starting telemetry", self._start_rank, trainer, shared, rank, size
            )
            started = exporting is not None
        agreed = ranks.gather((started, bool(exporting)))
        if shared is None:  # rank 0 is off (and said why): so is every rank
            self._end()
            ranks.close()
            return
        failed = [r for r, (ok, _) in enumerate(agreed) if not ok]
        if failed:
            if ranks.is_first:
                _log.warning(
                    "telemetry: off on every rank: rank %s could not start it (its warning "
                    "says why); training goes on",
                    ", ".join(map(str, failed)),
                )
            self._end()
            ranks.close()
            return
        if not any(on for _, on in agreed[1:]):  # only rank 0 exports: nothing to agree on
            ranks.close()
            return
        self._ranks = ranks
        self._tee_logs = ranks.is_first

    def _on_here(self, trainer: Any, quiet: bool) -> TelemetryConfig | None:
        """The settings when telemetry is on here (a known trainer, good settings, enabled with
        an exporter and the SDK), else None: what every rank decides alone, alike, before any
        rank sends a thing."""
        from nemo_rl.telemetry.config import read_settings
        from spanspec.findings import SpecError
        from spanspec.settings import SettingsError

        if self._known(trainer, quiet) is None:
            return None
        config = _config(self._config, quiet)
        if config is None:
            return None
        try:
            settings = read_settings(config.explicit(), env=os.environ)
        except (SettingsError, SpecError) as exc:
            if not quiet:
                _log.warning("telemetry: off: %s", _one_line(exc))
            return None
        if not (settings.enabled and settings.exporters):
            return None
        if importlib.util.find_spec("opentelemetry.sdk") is None:
            return config  # rank 0 warns that the SDK is missing, and every rank is off
        if "export_strategy" not in config.model_fields_set:
            # A TRL run's processes are its ranks: each exports unless the settings say otherwise
            # (NEMO_RL_OTEL_EXPORT_STRATEGY still wins); rank 0 always does.
            config = TelemetryConfig(**{**config.explicit(), "export_strategy": "all_ranks"})
        return config

    def _shared_settings(self) -> dict[str, Any]:
        """What rank 0 sends the other ranks: the settings it resolved (the run id included) as
        the ``NEMO_RL_OTEL_*`` variables, and the job's resource (``OTEL_RESOURCE_ATTRIBUTES``),
        as nemo_rl's driver leaves them to its workers."""
        env = self._settings.to_env()
        resource = os.environ.get("OTEL_RESOURCE_ATTRIBUTES")
        if resource:
            env["OTEL_RESOURCE_ATTRIBUTES"] = resource
        return {"env": env, "run_dir": self._run_dir, "max_steps": self._max_steps}

    def _start_rank(self, trainer: Any, shared: dict[str, Any], rank: int, size: int) -> bool:
        """Starts telemetry on rank ``rank`` > 0 from rank 0's settings; returns whether this
        rank exports (the export strategy may leave it out: it still joins the agreement)."""
        os.environ.update(shared["env"])  # rank 0 decided: its settings and run id here too
        handle = init_telemetry_worker(rank, size, ranks_.GROUP)
        self._settings, self._started = handle.settings, True
        self._run_dir, self._max_steps = str(shared["run_dir"]), int(shared["max_steps"])
        atexit.register(self._end)
        if not handle.is_exporting:
            return False
        algorithm = self._known(trainer, quiet=True)
        assert algorithm is not None  # _on_here said so
        phases = TrainerPhases(trainer, algorithm, self._guard, _model_label(trainer.model))
        self._install(phases, quiet=True)
        return True

    def _share_step(self, step: int) -> None:
        """Rank 0 opens step ``step`` and sends its trace context; another rank joins it."""
        ranks, phases = self._ranks, self._phases
        assert ranks is not None
        if ranks.is_first and phases is not None:
            phases.open_step(step)
        carrier = propagate.inject() if ranks.is_first else None
        try:
            carrier = ranks.broadcast(carrier)
        except Exception:
            # A broken group: no more collectives here; rank 0 traces on alone, a rank whose
            # spans would have no step to sit in stops.
            self._ranks = None
            if not ranks.is_first:
                self._end()
            raise
        if not ranks.is_first and phases is not None:
            phases.join_step(step, carrier)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Closes every span, flushes and prints where the step time went (rank 0; with
        several ranks, once every rank has flushed, and the cost of them all)."""
        if not self._started:
            return
        ranks, others = self._ranks, []
        if ranks is not None and ranks.is_first:
            # Every other rank flushes first, then says so with its cost; only then does rank 0
            # end the job span and flush: a reader that meets the job (a root) takes its steps
            # as done, so the other ranks' spans must be in the file before it.
            costs = self._guard.call("gathering the ranks' telemetry cost", ranks.gather, None)
            others = [c for c in (costs or [])[1:] if c is not None]
        stats = self._guard.call("ending telemetry", self._end)
        if ranks is not None and not ranks.is_first:
            own = stats.cost() if stats is not None else None
            self._guard.call("sending this rank's telemetry cost", ranks.gather, own)
        if ranks is not None:
            ranks.close()
        if self._summary and state.is_world_process_zero:
            self._guard.call("the step summary", self._print_summary, args, stats, others)

    def _end(self) -> Any:
        phases, self._phases = self._phases, None
        started, self._started = self._started, False
        self._ranks = None
        if phases is not None:
            phases.spans.close_all()
        logger, self._logger = self._logger, None
        if logger is not None:
            logger.close()
        return shutdown_telemetry() if started else None

    def _print_summary(self, args: Any, stats: Any, others: list[Any]) -> None:
        from nemo_rl.telemetry.breakdown import steps_done_lines
        from nemo_rl.telemetry.config import STRAGGLER_THRESHOLD

        settings = self._settings
        if stats is not None:
            print(job_cost(stats, others).line())
        threshold = settings.extra.get("straggler_threshold", STRAGGLER_THRESHOLD.default)
        for line in steps_done_lines(settings, str(args.output_dir), threshold):
            print(line)
        sys.stdout.flush()

    # -- steps ------------------------------------------------------------------------------

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Opens ``rl.<algo>.step`` numbered from 1 (``global_step`` + 1); with several ranks,
        rank 0's, which the others join."""
        if self._ranks is not None:
            self._guard.call(
                "sharing the step's trace context", self._share_step, state.global_step + 1
            )
        elif self._phases is not None:
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
        # The run's closing summary (train_runtime, train_loss) is no step's scalars; with
        # several ranks, TRL's scalars are the run's (reduced over the ranks): rank 0 tees them.
        if self._phases is not None and self._tee_logs and logs and "train_runtime" not in logs:
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


def _config(
    given: TelemetryConfig | Mapping[str, Any] | None, quiet: bool = False
) -> TelemetryConfig | None:
    """The settings block as given (a mapping is validated), or None (warned unless ``quiet``)
    when it is bad."""
    if isinstance(given, TelemetryConfig):
        return given
    try:
        return TelemetryConfig(**dict(given or {}))
    except ValueError as exc:
        if not quiet:
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


def _model_label(model: Any) -> str:
    """The model's name as the job and its spans give it (its folder or hub id, else its class)."""
    from nemo_rl.models.pretrained import model_label

    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    return model_label(name) if name else type(model).__name__


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


def _untested_trl() -> str | None:
    """The TRL versions this integration is tested with (the ``trl`` extra's pin, from this
    package's own metadata) when the installed TRL is outside them, else None."""
    try:
        from importlib.metadata import packages_distributions, requires, version

        from packaging.requirements import Requirement

        (dist, *_) = packages_distributions()["nemo_rl"]
        pins = [Requirement(r) for r in requires(dist) or ()]
        pin = next(r for r in pins if r.name == "trl")
        installed = version("trl")
    except Exception:  # run from a checkout that is not installed, or no metadata: no verdict
        return None
    return None if pin.specifier.contains(installed, prereleases=True) else str(pin.specifier)


def _trl_version() -> str:
    try:
        from importlib.metadata import version

        return version("trl")
    except Exception:
        return "(unknown version)"
