"""Every driver-to-actor call carries the W3C trace context, so worker spans join the driver's trace.

Two halves, written once:

- ``@carries_trace`` on an actor method: the method accepts a hidden ``_trace_carrier`` keyword
  and runs its body with that carrier's context attached. Works for sync and ``async def``
  methods. Called without a carrier (in-process, in a unit test) it just runs.
- ``call(actor.method, *args, **kwargs)`` on the driver (or in a worker that calls another
  worker): injects the current context into ``_trace_carrier`` and returns the ``ObjectRef``.

A span can also be named across processes without being a parent: ``span_ref(span)`` is a small
picklable ``SpanRef`` (trace id, span id, flags) that another process turns back into a
``SpanContext`` with ``SpanRef.context()`` to link to it (an async-GRPO step links to the rollouts
it trained on, which ran in the collector before the step existed).

A process whose telemetry is off still attaches and re-injects the carrier, so a context passing
through a non-exporting rank to a second actor is kept.

``call`` also notes the call on the caller's innermost span that declares a ``max_duration``
(:func:`spanspec.watchdog.note_call`), so a stall warning names the worker call the phase is
waiting for; that costs one lookup when no such span is open.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from opentelemetry import trace

from spanspec import propagate, watchdog

__all__ = ["CARRIER_KWARG", "SpanRef", "call", "carries_trace", "remember_pid", "span_ref"]

CARRIER_KWARG = "_trace_carrier"

F = TypeVar("F", bound=Callable[..., Any])


def carries_trace(fn: F) -> F:
    """Returns ``fn`` wrapped to run under the trace context passed in ``_trace_carrier``.

    Raises ``TypeError`` for a generator method (Ray streams those; not needed here).
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"@carries_trace does not support generator methods: {fn.__qualname__}")

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(
            *args: Any, _trace_carrier: dict[str, str] | None = None, **kw: Any
        ):
            if not _trace_carrier:
                return await fn(*args, **kw)
            with propagate.attached(_trace_carrier):
                return await fn(*args, **kw)

        return _mark(async_wrapper, fn)  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, _trace_carrier: dict[str, str] | None = None, **kw: Any):
        if not _trace_carrier:
            return fn(*args, **kw)
        with propagate.attached(_trace_carrier):
            return fn(*args, **kw)

    return _mark(wrapper, fn)  # type: ignore[return-value]


def _mark(wrapper: Any, fn: Callable[..., Any]) -> Any:
    # Ray checks call arguments against the signature of inspect.unwrap(method), so the wrapper
    # must not point back at fn (__wrapped__) and must declare the hidden keyword itself.
    del wrapper.__wrapped__
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    carrier = inspect.Parameter(CARRIER_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params.insert(len(params) - 1, carrier)
    else:
        params.append(carrier)
    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__carries_trace__ = True
    return wrapper


def call(method: Any, *args: Any, **kwargs: Any) -> Any:
    """Calls ``method.remote(*args, **kwargs)`` with the current trace context; returns the ``ObjectRef``.

    ``method`` is a Ray actor method handle (``actor.train``) whose target is decorated with
    ``@carries_trace``. Raises ``TypeError`` if the caller already passed ``_trace_carrier``.
    """
    if CARRIER_KWARG in kwargs:
        raise TypeError(f"{CARRIER_KWARG} is set by call(); do not pass it yourself")
    carrier = propagate.inject()
    if carrier:
        kwargs[CARRIER_KWARG] = carrier
    ref = method.remote(*args, **kwargs)
    watchdog.note_call(_describe(method), lambda: _pending(ref))
    return ref


def _describe(method: Any) -> str:
    """``PolicyWorker.train (actor 3f2a..., pid 4711)``: what a stall warning says is awaited."""
    name = getattr(method, "_method_name", None) or getattr(method, "__name__", "call")
    handle = getattr(method, "_actor", None)
    if isinstance(handle, weakref.ref):
        handle = handle()
    cls, where = "", ""
    if handle is not None:
        descriptor = getattr(handle, "_ray_actor_creation_function_descriptor", None)
        cls = getattr(descriptor, "class_name", "") or ""
        actor_id = getattr(handle, "_actor_id", None)
        if actor_id is not None:
            where = f" (actor {actor_id.hex()[:8]}{_pid_of(actor_id.hex())})"
    return f"{cls + '.' if cls else ''}{name}{where}"


def _pid_of(actor_id: str) -> str:
    pid = _actor_pids.get(actor_id)
    return f", pid {pid}" if pid else ""


_actor_pids: dict[str, int] = {}


def remember_pid(actor: Any, pid: int) -> None:
    """Note that ``actor`` runs as process ``pid``, for the stall warning's worker calls."""
    actor_id = getattr(actor, "_actor_id", None)
    if actor_id is not None and pid:
        _actor_pids[actor_id.hex()] = pid


def _pending(ref: Any) -> bool:
    """Whether the call's result is still awaited (asked of Ray without fetching it)."""
    import ray

    ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
    return not ready


class SpanRef(NamedTuple):
    """A span's identity as plain ints, to send to another process and link to there."""

    trace_id: int
    span_id: int
    trace_flags: int

    def context(self) -> trace.SpanContext:
        """Returns the ``SpanContext`` this names (remote), for ``spanspec.span(..., links=)``."""
        return trace.SpanContext(
            self.trace_id,
            self.span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(self.trace_flags),
        )


def span_ref(span: Any = None) -> SpanRef | None:
    """Returns the ``SpanRef`` of ``span`` (default: the current span), or None when there is no
    recorded span (its group is off, or telemetry is)."""
    ctx = (span if span is not None else trace.get_current_span()).get_span_context()
    if not ctx.is_valid:
        return None
    return SpanRef(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
