"""A TRL trainer's phases as the registry's spans, found by wrapping the trainer's own methods.

:class:`TrainerPhases` wraps, on one trainer *instance* (its class is never touched), the
narrowest method TRL runs for each phase:

=====================================  =============================================
``_generate_and_score_completions``    ``rl.grpo.rollout`` (until its rewards are in), then
                                       ``rl.grpo.advantage`` (what TRL does after the rewards)
``_generate``                          ``rl.grpo.generation``, with the gen_ai token counts
``_get_per_token_logps_and_entropies`` ``rl.grpo.logprob`` / ``rl.grpo.reference_policy``
                                       (only inside a rollout; in the loss it is the update)
``_calculate_rewards``                 ``rl.grpo.reward``; each reward function below it is one
                                       ``rl.grpo.reward_function``
``compute_loss`` .. optimiser step     ``rl.<algo>.policy_update`` (opened by the first
                                       micro-batch's loss, closed by ``on_optimizer_step``)
the reference model's forward          ``rl.dpo.reference_policy`` (a module hook)
``evaluate``                           ``rl.<algo>.evaluate``
``_save_checkpoint``                   ``rl.<algo>.checkpoint``
``_maybe_log_save_evaluate``           closes ``rl.<algo>.step`` after the step's evaluation
                                       and checkpoint, as nemo_rl's loops hold them
=====================================  =============================================

With several ranks, rank 0 opens each ``rl.<algo>.step`` (:meth:`TrainerPhases.open_step`) and
the others join it from its trace context (:meth:`TrainerPhases.join_step`): their phase spans
are its children, and they have no step span of their own.

A method a TRL version lacks is reported (:attr:`TrainerPhases.missing`) and its phase left
out; the rest is still traced. Every piece of telemetry code runs behind :class:`Guard`, which
counts a failure and warns once: TRL's own exceptions pass through unchanged, ours never reach
training.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

import spanspec
from nemo_rl.telemetry import record_token_usage
from spanspec import propagate

__all__ = ["ALGORITHMS", "Guard", "OpenSpans", "TrainerPhases", "algorithm_of"]

_log = logging.getLogger("nemo_rl.integrations.trl")

ALGORITHMS = {
    "GRPOTrainer": "grpo",
    "DPOTrainer": "dpo",
    "SFTTrainer": "sft",
    "RewardTrainer": "rm",
}
"""TRL's trainer classes and the registry algorithm whose span names they get."""


def algorithm_of(trainer: Any) -> str | None:
    """Returns the registry algorithm of ``trainer`` (by its class or the TRL class it derives
    from: a user's subclass of ``GRPOTrainer`` is GRPO), or None for a trainer not known here."""
    for cls in type(trainer).__mro__:
        if cls.__name__ in ALGORITHMS and cls.__module__.startswith("trl"):
            return ALGORITHMS[cls.__name__]
    return None


class Guard:
    """Telemetry's own failures: each kind counted and warned once, never raised into training."""

    def __init__(self) -> None:
        self.failures: Counter[str] = Counter()

    def call(self, what: str, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Returns ``fn(*args)``, or None when ``fn`` is None or raised (counted, warned once)."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self.failed(what, exc)
            return None

    def failed(self, what: str, exc: BaseException) -> None:
        """Counts a failure of ``what``; the first one of each kind is one warning line."""
        self.failures[what] += 1
        if self.failures[what] == 1:
            _log.warning(
                "telemetry: %s failed (%s: %s); training goes on, later failures are counted",
                what,
                type(exc).__name__,
                exc,
            )


class _Open:
    """One span opened by hand: its key (the phase), context manager, span and step number."""

    __slots__ = ("cm", "count", "iteration", "key", "span")

    def __init__(self, key: str, cm: AbstractContextManager[Span], iteration: int) -> None:
        self.key, self.cm, self.iteration, self.count = key, cm, iteration, 0
        self.span: Span = cm.__enter__()


class _Joined(AbstractContextManager[Span]):
    """Another process's span as the current context (a carrier's), without a span of its own:
    entered, the context is attached and its (non-recording) span given; exited, detached."""

    def __init__(self, carrier: dict[str, str] | None) -> None:
        self._carrier = carrier or {}
        self._token: Any = None

    def __enter__(self) -> Span:
        self._token = otel_context.attach(propagate.extract(self._carrier))
        return trace.get_current_span()

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            otel_context.detach(token)


class OpenSpans:
    """Spans opened and closed apart (a callback opens a step, another closes it), kept as a
    stack so they are always ended innermost first and each restores the context it found."""

    def __init__(self) -> None:
        self._stack: list[_Open] = []

    def open(self, key: str, cm: AbstractContextManager[Span], iteration: int = 0) -> _Open:
        """Enters ``cm`` as the current span under ``key``; returns its entry."""
        entry = _Open(key, cm, iteration)
        self._stack.append(entry)
        return entry

    def find(self, key: str) -> _Open | None:
        """Returns the innermost open entry of ``key``, or None."""
        for entry in reversed(self._stack):
            if entry.key == key:
                return entry
        return None

    def top(self) -> _Open | None:
        """Returns the innermost open entry, or None."""
        return self._stack[-1] if self._stack else None

    def close(self, entry: _Open | None, exc: BaseException | None = None) -> None:
        """Ends ``entry`` and every span opened inside it (``exc`` recorded on them); nothing
        when it is already closed."""
        if entry is None or not any(e is entry for e in self._stack):
            return
        while self._stack:
            top = self._stack.pop()
            top.cm.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
            if top is entry:
                return

    def close_key(self, key: str) -> None:
        """Ends the innermost open ``key`` span, if any."""
        self.close(self.find(key))

    def close_all(self) -> None:
        """Ends every open span, innermost first."""
        while self._stack:
            self.close(self._stack[0])


class TrainerPhases:
    """The phase spans of one trainer of ``algorithm``; :meth:`install` wraps its methods."""

    def __init__(self, trainer: Any, algorithm: str, guard: Guard, model: str) -> None:
        self.trainer = trainer
        self.algorithm = algorithm
        self.guard = guard
        self.model = model
        self.spans = OpenSpans()
        self.missing: list[str] = []
        """``method (phase)`` for each phase this TRL version gave no method for."""

    # -- the step, opened and closed by the callback ------------------------------------------

    def iteration(self) -> int:
        """The step in progress (``rl.iteration``, from 1), else the steps done (an evaluation
        or checkpoint outside a step: 0 before the first)."""
        step = self.spans.find("step")
        return step.iteration if step is not None else int(self.trainer.state.global_step)

    def open_step(self, step: int) -> None:
        """Opens ``rl.<algo>.step`` number ``step`` (a step still open is ended first)."""
        self.spans.close_key("step")
        a = self.algorithm
        attributes = {"rl.iteration": step, "rl.algorithm": a, "input.value": f"{a} step {step}"}
        self.spans.open("step", spanspec.span(f"rl.{a}.step", **attributes), step)

    def join_step(self, step: int, carrier: dict[str, str] | None) -> None:
        """Joins rank 0's step number ``step`` on another rank: its trace context (``carrier``,
        the W3C headers rank 0 broadcast) is this rank's current context until the step closes,
        so this rank's phase spans are children of rank 0's ``rl.<algo>.step``, in its trace; no
        step span of this rank's own (the readers count each step once)."""
        self.spans.close_key("step")
        self.spans.open("step", _Joined(carrier), step)

    def close_step(self) -> None:
        """Ends the open step and everything inside it."""
        self.spans.close_key("step")

    def close_update(self) -> None:
        """Ends the step's policy update (the optimiser stepped), with its micro-batch count."""
        entry = self.spans.find("policy_update")
        if entry is not None:
            spanspec.annotate(entry.span, **{"rl.num_micro_batches": entry.count})
            self.spans.close(entry)

    # -- installing the wrappers --------------------------------------------------------------

    def install(self) -> list[str]:
        """Wraps this trainer's phase methods; returns what could not be traced (``missing``)."""
        a = self.algorithm
        if a == "grpo":
            self._wrap("_generate_and_score_completions", "rl.grpo.rollout", self._rollout)
            self._wrap("_generate", "rl.grpo.generation", self._generation)
            self._wrap(
                "_get_per_token_logps_and_entropies",
                "rl.grpo.logprob, rl.grpo.reference_policy",
                self._logprob,
            )
            self._wrap("_calculate_rewards", "rl.grpo.reward", self._reward)
            self._wrap_reward_functions()
        self._wrap("compute_loss", f"rl.{a}.policy_update", self._loss)
        if a == "dpo":
            self._hook_reference()
        self._wrap("evaluate", f"rl.{a}.evaluate", self._evaluate)
        self._wrap("_save_checkpoint", f"rl.{a}.checkpoint", self._checkpoint)
        self._wrap("_maybe_log_save_evaluate", "", self._after_step_work)
        return self.missing

    def _wrap(
        self,
        method: str,
        phase: str,
        before: Callable[[tuple[Any, ...], dict[str, Any]], _Open | None],
    ) -> None:
        """Replaces ``trainer.<method>`` by a wrapper: ``before(args, kwargs)`` may open a span,
        which ends with the call (recording TRL's exception, which is raised on as it was)."""
        original = getattr(self.trainer, method, None)
        if not callable(original):
            self.missing.append(f"{method} ({phase or 'the step ends at on_step_end'})")
            return
        guard, what = self.guard, f"tracing {method}"

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            entry = guard.call(what, before, args, kwargs)
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                guard.call(what, self._error, method, entry, exc)
                raise
            guard.call(what, self._after, method, entry, result)
            return result

        setattr(self.trainer, method, wrapper)

    def _after(self, method: str, entry: _Open | None, result: Any) -> None:
        after = getattr(self, f"_after_{method.lstrip('_')}", None)
        if after is not None:
            after(entry, result)
        self.spans.close(entry)

    def _error(self, method: str, entry: _Open | None, exc: BaseException) -> None:
        if method == "_generate_and_score_completions":  # its rollout may have become advantage
            self.spans.close(self.spans.find("advantage"), exc)
        self.spans.close(entry, exc)

    # -- GRPO's rollout -----------------------------------------------------------------------

    def _rollout(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        self.spans.close_key("policy_update")  # generating mid-step (steps_per_generation < GA)
        inputs = args[0] if args else kwargs.get("inputs", ())
        it = self.iteration()
        attributes = {
            "rl.iteration": it,
            "rl.num_generations_per_prompt": int(self.trainer.num_generations),
            "rl.batch_size": len(inputs),
        }
        return self.spans.open("rollout", spanspec.span("rl.grpo.rollout", **attributes), it)

    def _after_generate_and_score_completions(self, entry: _Open | None, result: Any) -> None:
        self.spans.close_key("advantage")

    def _generation(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        prompts = args[0] if args else kwargs.get("prompts", ())
        it = self.iteration()
        attributes = {"rl.iteration": it, "rl.batch_size": len(prompts)}
        return self.spans.open("generation", spanspec.span("rl.grpo.generation", **attributes))

    def _after_generate(self, entry: _Open | None, result: Any) -> None:
        # (prompt_ids, completion_ids, ...): token id lists per row, as TRL counts num_tokens
        prompt_ids, completion_ids = result[0], result[1]
        input_tokens = sum(len(ids) for ids in prompt_ids)
        output_tokens = sum(len(ids) for ids in completion_ids)
        if entry is not None:
            spanspec.annotate(
                entry.span,
                **{
                    "rl.num_tokens": input_tokens + output_tokens,
                    "gen_ai.usage.input_tokens": input_tokens,
                    "gen_ai.usage.output_tokens": output_tokens,
                },
            )
        provider = "vllm" if getattr(self.trainer, "use_vllm", False) else "torch"
        record_token_usage(input_tokens, output_tokens, provider=provider, model=self.model)

    def _logprob(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        if self.spans.find("rollout") is None:  # the loss's own forward: the policy update
            return None
        model = args[0] if args else kwargs.get("model")
        input_ids = args[1] if len(args) > 1 else kwargs.get("input_ids")
        attributes = {"rl.iteration": self.iteration(), "rl.batch_size": int(input_ids.shape[0])}
        reference = getattr(self.trainer, "ref_model", None)
        if reference is not None and model is reference:
            cm = spanspec.span("rl.grpo.reference_policy", **attributes)
        else:
            cm = spanspec.span("rl.grpo.logprob", **attributes)
        return self.spans.open("logprob", cm)

    def _reward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        cm = spanspec.span("rl.grpo.reward", **{"rl.iteration": self.iteration()})
        return self.spans.open("reward", cm)

    def _after_calculate_rewards(self, entry: _Open | None, result: Any) -> None:
        # result: rewards per function (rows x functions); the step's reward is their weighted sum
        weights = self.trainer.reward_weights.to(result.device)
        mean = float((result * weights.unsqueeze(0)).nansum(dim=1).nanmean())
        if entry is not None:
            if math.isfinite(mean):
                spanspec.annotate(entry.span, **{"rl.reward.mean": mean})
            self.spans.close(entry)
        rollout = self.spans.find("rollout")
        if rollout is not None and self.spans.top() is rollout:
            # What TRL does after the rewards is the advantage (and the batch's bookkeeping): a
            # phase of the step, as in nemo_rl's loop, not of the rollout.
            self.spans.close(rollout)
            it = self.iteration()
            self.spans.open("advantage", spanspec.span("rl.grpo.advantage", **{"rl.iteration": it}))

    def _wrap_reward_functions(self) -> None:
        funcs = getattr(self.trainer, "reward_funcs", None)
        names = getattr(self.trainer, "reward_func_names", None)
        if not isinstance(funcs, list) or not isinstance(names, list | tuple):
            self.missing.append("reward_funcs (rl.grpo.reward_function)")
            return
        import torch

        for i, (func, name) in enumerate(zip(funcs, names, strict=False)):
            # A reward model is called as a module and an async function is awaited: both keep
            # their type (TRL dispatches on it) and are timed only as part of rl.grpo.reward.
            if isinstance(func, torch.nn.Module) or _is_async(func):
                continue
            funcs[i] = self._reward_function(func, str(name))

    def _reward_function(self, func: Callable[..., Any], name: str) -> Callable[..., Any]:
        guard, spans = self.guard, self.spans

        def open_function() -> _Open | None:
            attributes = {"rl.iteration": self.iteration(), "rl.reward.function": name}
            return spans.open(
                "reward_function", spanspec.span("rl.grpo.reward_function", **attributes)
            )

        def annotate_mean(entry: _Open | None, rewards: Any) -> None:
            values = [float(r) for r in rewards if r is not None]
            values = [v for v in values if math.isfinite(v)]
            if entry is not None and values:
                spanspec.annotate(entry.span, **{"rl.reward.mean": sum(values) / len(values)})

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            entry = guard.call("tracing a reward function", open_function)
            try:
                rewards = func(*args, **kwargs)
            except BaseException as exc:
                guard.call("tracing a reward function", spans.close, entry, exc)
                raise
            guard.call("tracing a reward function", annotate_mean, entry, rewards)
            guard.call("tracing a reward function", spans.close, entry)
            return rewards

        return wrapper

    # -- every algorithm: update, reference, evaluation, checkpoint -----------------------------

    def _loss(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # Only a training step's loss (evaluation calls compute_loss too); the span stays open
        # over backward and the optimiser step, and is closed by on_optimizer_step.
        if self.spans.find("step") is None or self.spans.find("evaluate") is not None:
            return None
        entry = self.spans.find("policy_update")
        if entry is None:
            it = self.iteration()
            cm = spanspec.span(f"rl.{self.algorithm}.policy_update", **{"rl.iteration": it})
            entry = self.spans.open("policy_update", cm, it)
        if entry is not None:
            entry.count += 1
        return None  # not ended with compute_loss

    def _hook_reference(self) -> None:
        reference = getattr(self.trainer, "ref_model", None)
        if reference is None or not hasattr(reference, "register_forward_pre_hook"):
            return  # PEFT's disabled adapter or precomputed log-probs: no reference forward
        guard, spans = self.guard, self.spans

        def open_reference(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if spans.find("step") is None and spans.find("evaluate") is None:
                return
            ids = kwargs.get("input_ids", args[0] if args else None)
            attributes = {"rl.iteration": self.iteration()}
            if ids is not None:
                attributes["rl.batch_size"] = int(ids.shape[0])
            spans.open("reference", spanspec.span("rl.dpo.reference_policy", **attributes))

        def close_reference(module: Any, args: Any, kwargs: Any, output: Any) -> None:
            spans.close_key("reference")

        reference.register_forward_pre_hook(
            lambda m, a, k: guard.call("tracing the reference", open_reference, m, a, k),
            with_kwargs=True,
        )
        reference.register_forward_hook(
            lambda m, a, k, o: guard.call("tracing the reference", close_reference, m, a, k, o),
            with_kwargs=True,
        )

    def _evaluate(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        dataset = args[0] if args else kwargs.get("eval_dataset")
        if dataset is None:
            dataset = getattr(self.trainer, "eval_dataset", None)
        it = int(self.trainer.state.global_step)
        attributes: dict[str, Any] = {"rl.iteration": it}
        if hasattr(dataset, "__len__") and not isinstance(dataset, dict):
            attributes["rl.eval.num_samples"] = len(dataset)
        cm = spanspec.span(f"rl.{self.algorithm}.evaluate", **attributes)
        return self.spans.open("evaluate", cm, it)

    def _after_evaluate(self, entry: _Open | None, result: Any) -> None:
        if entry is None or not isinstance(result, dict):
            return
        for key in ("eval_rewards/accuracies", "eval_accuracy"):  # DPO's, the reward model's
            if isinstance(result.get(key), int | float):
                spanspec.annotate(entry.span, **{"rl.eval.accuracy": float(result[key])})
                return

    def _checkpoint(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Open | None:
        step = int(self.trainer.state.global_step)
        folder = os.path.join(str(self.trainer.args.output_dir), f"checkpoint-{step}")
        attributes = {
            "rl.iteration": step,
            "rl.checkpoint.step": step,
            "rl.checkpoint.path": folder,
        }
        cm = spanspec.span(f"rl.{self.algorithm}.checkpoint", **attributes)
        return self.spans.open("checkpoint", cm, step)

    def _after_step_work(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        return None

    def _after_maybe_log_save_evaluate(self, entry: _Open | None, result: Any) -> None:
        self.close_step()  # the step's logging, evaluation and checkpoint are done


def _is_async(func: Any) -> bool:
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 (a callable object's method)
    )
