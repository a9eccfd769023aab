"""``span()`` and ``traced()``: the hot path.

Decided once, at :func:`activate`: a dict maps every declared span name to either the shared
no-op object (group off) or a prepared gate (group on). A call site costs one dict lookup when
off, and touches OpenTelemetry only when on. The dict is replaced whole on (de)activation, so a
call never sees half a configuration. Needs only ``opentelemetry-api``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode

from spanspec import usage, watchdog
from spanspec._coerce import BAD, FAST_TYPES, coerce, describe
from spanspec._text import repair, shorten
from spanspec.findings import Finding, SpecError
from spanspec.spec import REDACTED, AttributeDef, SpanEntry, Spec

__all__ = [
    "FROM_CONVENTIONS",
    "REDACTED",
    "activate",
    "active_spec",
    "annotate",
    "deactivate",
    "enabled_groups",
    "enabled_span_names",
    "is_active",
    "sensitive_keys",
    "span",
    "spans_ended_in_another_thread",
    "traced",
]


class _FromConventions:
    """The default of :func:`activate`'s ``env_var``: the registry's ``$<env_prefix>SPAN_GROUPS``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FROM_CONVENTIONS"


FROM_CONVENTIONS: Any = _FromConventions()
_log = logging.getLogger("spanspec")
# Bound once: the enabled path calls them on every span.
_attach, _detach, _in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context
_thread_id = threading.get_ident
_INTERNAL = trace.SpanKind.INTERNAL


def _current_context_var() -> tuple[ContextVar[Any] | None, str]:
    """The ``ContextVar`` that holds OpenTelemetry's current context, and the key its span is
    kept under, when OpenTelemetry runs its default (contextvars) runtime context; else
    ``(None, "")`` and the public ``attach``/``detach`` are used.

    Setting the variable directly is what ``attach(set_span_in_context(span))`` does, minus five
    Python calls on every enabled span; it is checked here, once, against the public functions.
    """
    var = getattr(getattr(otel_context, "_RUNTIME_CONTEXT", None), "_current_context", None)
    if not isinstance(var, ContextVar):
        return None, ""
    try:
        keys = list(trace.set_span_in_context(INVALID_SPAN, otel_context.Context()))
        token = var.set(otel_context.Context({**var.get(), keys[0]: INVALID_SPAN}))
        try:
            same = len(keys) == 1 and trace.get_current_span() is INVALID_SPAN
            same = same and otel_context.get_current() is var.get()
        finally:
            var.reset(token)
    except Exception:
        return None, ""
    return (var, keys[0]) if same else (None, "")


_CONTEXT, _SPAN_KEY = _current_context_var()
_Context = otel_context.Context
F = TypeVar("F", bound=Callable[..., Any])


class _NoOpSpan:
    """The one object every disabled site returns. Entering it gives OpenTelemetry's own
    non-recording span (``INVALID_SPAN``): ``set_attribute``, ``add_link`` and :func:`annotate`
    do nothing on it and ``is_recording()`` is False, so a caller never tests for None."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return INVALID_SPAN

    def __exit__(self, *exc_info: object) -> bool:
        return False

    def __repr__(self) -> str:
        return "<spanspec no-op span>"


NOOP = _NoOpSpan()
_UNDECLARED = object()


class _Gate:
    """An enabled span name, prepared: its tracer and per-attribute checks."""

    __slots__ = (
        "attributes",
        "bound",
        "constants",
        "entry",
        "live",
        "measured",
        "name",
        "strict",
        "tracer",
        "types",
        "usage_keys",
    )

    def __init__(
        self,
        name: str,
        entry: SpanEntry | None,
        tracer: trace.Tracer,
        strict: bool,
        measure: tuple[str | None, ...] = (),
    ) -> None:
        self.name = name
        self.entry = entry
        self.tracer = tracer
        self.strict = strict
        self.attributes: Mapping[str, AttributeDef] = entry.attributes if entry else {}
        # The registry's constants, set at start over the caller's (None: the span has none).
        self.constants: dict[str, Any] | None = (
            dict(entry.constants) if entry and entry.constants else None
        )
        # A span with a max_duration is watched while open; any other pays nothing for it.
        self.bound = entry.max_duration_s if entry else None
        # What the runtime measures on it (usage.end()'s values: CPU, RSS peak, rise): (key,
        # position, declared type) for each of the registry's usage conventions it declares.
        # ``measure`` is those conventions' keys, in that order (empty: nothing measured).
        self.measured = tuple(
            (key, i, FAST_TYPES[self.attributes[key].type])
            for i, key in enumerate(measure)
            if key is not None and key in self.attributes
        )
        # The common case, all three declared of their natural types: set as measured.
        kinds = tuple(kind for _, _, kind in self.measured)
        self.usage_keys = (
            tuple(key for key, _, _ in self.measured) if kinds == (float, int, int) else None
        )
        self.live: type[_LiveSpan] = _LIVE[self.bound is not None, bool(self.measured)]
        # The one exact Python type accepted without the slower general check, per key (None:
        # always the general check).
        self.types = {
            key: FAST_TYPES.get(a.type) if a.allowed is None and not a.sensitive else None
            for key, a in self.attributes.items()
        }

    def start_attributes(self, attributes: dict[str, Any]) -> dict[str, Any] | None:
        """What a span starts with: the caller's attributes cleaned, the constants over them."""
        constants = self.constants
        if constants is None:
            return self.clean(attributes) if attributes else None
        return {**self.clean(attributes), **constants} if attributes else constants

    def clean(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """Declared, well-typed attributes; sensitive values redacted; the rest dropped or raised.

        ``attributes`` (a ``**kwargs`` dict, the caller's own) comes back as it is when every
        value is declared and of its exact type, the common case: no copy on the hot path.
        """
        types = self.types
        for key, value in attributes.items():
            if type(value) is not types.get(key):  # undeclared and None never match a type
                return self._cleaned(attributes)
        return attributes

    def stall_attributes(self, attributes: dict[str, Any] | None) -> dict[str, Any]:
        """What a stall warning shows of a watched span's attributes: what :meth:`clean` kept at
        its start (called by the watchdog thread, without clean's warnings, given then)."""
        return self._cleaned(attributes, quiet=True) if attributes else {}

    def _cleaned(self, attributes: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
        out = {}
        types = self.types
        for key, value in attributes.items():
            if key not in types:
                if quiet:
                    continue
                _problem(
                    self,
                    "span.undeclared_attribute",
                    f"span '{shorten(self.name)}': attribute '{shorten(str(key))}' is not declared for it in the registry",
                    key,
                )
                continue
            if type(value) is types[key]:
                out[key] = value
                continue
            decl = self.attributes[key]
            value = coerce(decl, value)
            if value is BAD:
                if quiet:
                    continue
                given = attributes[key]
                # A sensitive value never reaches a message (which logs may export).
                shown = "(value not shown: sensitive)" if decl.sensitive else shorten(repr(given))
                _problem(
                    self,
                    "span.attribute_type",
                    f"span '{shorten(self.name)}': attribute '{key}' must be {describe(decl)}, got "
                    f"{type(given).__name__} {shown}",
                    key,
                )
                continue
            out[key] = REDACTED if decl.sensitive else value
        return out


_warned: set[tuple[str, str]] = set()
_warn_lock = threading.Lock()


def _problem(gate: _Gate, finding_id: str, message: str, key: str = "") -> None:
    """Strict: raise. Otherwise: warn once per (span, attribute)."""
    if gate.strict:
        raise SpecError([Finding(finding_id, message, file="<runtime>")])
    with _warn_lock:
        if (gate.name, key) in _warned:
            return
        _warned.add((gate.name, key))
    advice = (
        "declare it in the registry"
        if finding_id == "span.undeclared_attribute"
        else "pass a value of the declared type"
    )
    _log.warning("%s (dropped; %s)", message, advice)


class _LiveSpan:
    """An enabled span: started as the current span on enter, always ended on exit.

    Entering the same object again (nested or later) starts another span; each exit ends the
    span its enter started and restores the context that enter found.
    """

    __slots__ = ("_attributes", "_gate", "_links", "_open")

    def __init__(self, gate: _Gate, attributes: dict[str, Any], links: Sequence[Any] = ()) -> None:
        self._gate = gate
        self._attributes = attributes
        self._links = links
        # (span, context token, entering thread, the enter before it): entered again before
        # exit, each exit pops its own. One slot set here: this runs for every enabled span.
        self._open: tuple[Span, object, int, Any] | None = None

    def start(self) -> Span:
        """Start the span without making it current (for generators)."""
        gate, links = self._gate, self._links
        return gate.tracer.start_span(
            gate.name,
            attributes=gate.start_attributes(self._attributes),
            links=_as_links(links) if links else None,
        )

    def __enter__(self) -> Span:
        if _handed_over:  # a span this thread entered was ended by another: restore first
            _restore_handed_over(_thread_id())
        gate, attributes, links = self._gate, self._attributes, self._links
        if attributes:  # gate.clean(), inlined: the common case (all declared, exact types) first
            types = gate.types
            for key, value in attributes.items():
                if type(value) is not types.get(key):  # undeclared and None never match
                    attributes = gate._cleaned(attributes)
                    break
        else:
            attributes = None
        if (constants := gate.constants) is not None:  # the registry's constants, over them
            attributes = {**attributes, **constants} if attributes else constants
        links = _as_links(links) if links else None
        var = _CONTEXT
        if var is not None:
            # start() and attach(set_span_in_context(span)), inlined for the contextvars runtime:
            # the current context is read once and handed to the SDK (which would read it
            # twice more), positionally: (name, context, kind, attributes, links).
            current = var.get()
            span = gate.tracer.start_span(gate.name, current, _INTERNAL, attributes, links)
            token = var.set(_Context({**current, _SPAN_KEY: span}))
        else:
            span = gate.tracer.start_span(gate.name, None, _INTERNAL, attributes, links)
            token = _attach(_in_context(span))
        # The thread is kept with the token: only the thread that entered can restore its context.
        self._open = (span, token, _thread_id(), self._open)
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        span, token, thread, self._open = self._open  # type: ignore[misc]
        # Not recording: shutdown already ended it as truncated (SIGTERM); leave it as it is.
        if span.is_recording():
            if exc is not None and not isinstance(exc, GeneratorExit):  # a generator closed
                _fail(span, exc)
            span.end()
        if thread != _thread_id():
            _exited_elsewhere(span, token, thread)
            return False
        if _CONTEXT is None:
            _detach(token)
        else:
            try:
                _CONTEXT.reset(token)
            except (ValueError, RuntimeError):  # entered in another context of this thread
                _exited_elsewhere(span, token, thread, "context (asyncio task)")
                return False
        if _handed_over:  # the span below this one may have been ended by another thread
            _restore_handed_over(thread)
        return False


# Spans entered by one thread and ended by another (a span handed over): entering thread id ->
# [(span, its context token)]. Only the entering thread can restore its own context (a context
# token is valid only in the context that made it), so it does, at its next span() enter or
# exit: while its current span is one of these, that span's token is reset. The ending thread's
# own context is never touched.
_handed_over: dict[int, list[tuple[Span, Any]]] = {}
_handed_over_count = 0


def _exited_elsewhere(span: Span, token: Any, thread: int, where: str = "thread") -> None:
    """A ``with span(...)`` block exited in another thread than it was entered in: the span is
    ended (by the caller), the entering thread restores its context at its next span, and one
    line is logged per span name (no SDK traceback)."""
    global _handed_over_count
    name = str(getattr(span, "name", "?"))
    with _warn_lock:
        _handed_over_count += 1
        alive = {t.ident for t in threading.enumerate()}
        for ended in [t for t in _handed_over if t not in alive]:
            del _handed_over[ended]  # a thread that is gone has no context left to restore
        _handed_over.setdefault(thread, []).append((span, token))
        if (name, "<thread>") in _warned:
            return
        _warned.add((name, "<thread>"))
    _log.warning(
        "span %r was ended in another %s than the one that entered it; it is ended, and "
        "that one's current span is restored at its next span (enter and exit a span in one "
        "thread and task; use links or the span context to hand work over)",
        shorten(name),
        where,
    )


def _restore_handed_over(thread: int) -> None:
    """In thread ``thread``: while its current span is one another thread ended, reset the
    context token its enter made (the span's parent becomes current again)."""
    if thread not in _handed_over:  # another thread's: this one pays a lookup, no lock
        return
    with _warn_lock:
        pending = _handed_over.get(thread, [])
        while pending:
            current = trace.get_current_span()
            match = next((i for i, (s, _) in enumerate(pending) if s is current), None)
            if match is None:  # a span still open above it, or another context of this thread
                return
            _, token = pending.pop(match)
            try:
                token.var.reset(token)  # an OpenTelemetry context token is a contextvars Token
            except (AttributeError, ValueError, RuntimeError):
                return  # not made in this context: leave it
        del _handed_over[thread]


def spans_ended_in_another_thread() -> int:
    """Return how many spans were ended by another thread than the one that entered them."""
    return _handed_over_count


class _WatchedSpan(_LiveSpan):
    """An enabled span with a ``max_duration``: the stall watchdog watches it while it is open
    as a ``with`` block (a ``@traced`` generator's span is not watched).

    The record ``_LiveSpan.__enter__`` keeps of this opening (``self._open``) is what the watchdog
    knows it by, so watching allocates one tuple; the attributes are cleaned for a warning only.
    """

    __slots__ = ()

    def __enter__(self) -> Span:
        span = _LiveSpan.__enter__(self)
        _watch(self._gate, self._attributes, span, self._open)
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        _unwatch(self._open)
        return _LiveSpan.__exit__(self, exc_type, exc, tb)


_watch, _unwatch = watchdog.opened, watchdog.closed


def _measured(base: type[_LiveSpan]) -> type[_LiveSpan]:
    """``base`` (a plain or a watched span) for the spans that declare the registry's usage
    conventions (``cpu_attribute``, ``rss_peak_attribute``, ``rss_rise_attribute``): the
    process's CPU time and memory peak within it are measured (:mod:`spanspec.usage`, keyed by
    the OpenTelemetry span's identity, unique while it is open) and set on it as it ends,
    inside the watchdog's watch where there is one."""

    class Measured(base):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def __enter__(self) -> Span:
            span = base.__enter__(self)
            _begin(id(span))
            return span

        def __exit__(
            self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
        ) -> bool:
            try:
                _set_usage(self._gate, self._open[0])  # type: ignore[index]
            except BaseException:  # strict mode's SpecError for a meter's value: still ended
                base.__exit__(self, exc_type, exc, tb)
                raise
            return base.__exit__(self, exc_type, exc, tb)

    Measured.__name__ = Measured.__qualname__ = f"_Measured{base.__name__.lstrip('_')}"
    return Measured


def _set_usage(gate: _Gate, span: Any) -> None:
    """Ends the measuring of ``span`` and sets what it declares of the values on it."""
    ended = _end(id(span))
    if ended is None:  # begun in the parent of this forked process: not this one's to measure
        return
    cpu, peak, rise, extra = ended
    keys = gate.usage_keys
    if keys is not None and rise is not None:  # all three, declared float, int, int
        measured = {keys[0]: cpu, keys[1]: peak, keys[2]: rise}
    else:
        values = (cpu, peak, rise)
        measured = {
            key: v if type(v) is kind else kind(v)  # the registry checked they are numbers
            for key, i, kind in gate.measured
            if (v := values[i]) is not None
        }
    scalars = True
    if extra:  # the program's meters (usage.add_meter): what the span declares, checked
        types = gate.types
        measured.update(gate.clean({k: v for k, v in extra.items() if k in types}))
        scalars = False
    _set_attributes(span, measured, scalars)


_begin, _end = usage.begin, usage.end
# The span class of a gate: (has a max_duration, measured) -> class.
_LIVE: dict[tuple[bool, bool], type[_LiveSpan]] = {
    (False, False): _LiveSpan,
    (True, False): _WatchedSpan,
    (False, True): _measured(_LiveSpan),
    (True, True): _measured(_WatchedSpan),
}


def _as_links(links: Sequence[Any]) -> list[trace.Link]:
    return [x if isinstance(x, trace.Link) else trace.Link(x) for x in links]


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


# -- the active configuration: replaced whole by activate()/deactivate() -------------------------

_gates: dict[str, Any] = {}
_default: Any = NOOP  # what an unknown name maps to: NOOP before activation, _UNDECLARED after
_spec: Spec | None = None
_groups: frozenset[str] = frozenset()
_tracer: trace.Tracer | None = None
_strict = False
_undeclared_gates: dict[str, _Gate] = {}
_lock = threading.Lock()
# Every attribute key any activated registry declared sensitive. Never shrinks (deactivate keeps
# it): spans still queued at shutdown are exported after deactivation and must stay redacted.
_sensitive: frozenset[str] = frozenset()


def sensitive_keys() -> frozenset[str]:
    """Return the attribute keys declared sensitive by every registry activated so far.

    The exporters redact these on every span, however the value was set (``span()`` keywords,
    ``set_attribute``, ``set_attributes``, another instrumentation).
    """
    return _sensitive


def span(
    name: str, /, *, links: Sequence[Any] = (), **attributes: Any
) -> AbstractContextManager[Span]:
    """Open the registry's span ``name`` as a context manager.

    ``links`` (OpenTelemetry ``SpanContext`` or ``Link`` objects) are the span's links: spans of
    other traces it depends on, such as the rollouts a training step consumed.

    ``with span("pipeline.load", **{"pipeline.batch.index": 3}) as s:`` gives the OpenTelemetry span.
    When the span's group is off or spanspec is not active it costs one dict lookup and gives
    OpenTelemetry's non-recording span (``is_recording()`` False; ``set_attribute``,
    ``add_link`` and :func:`annotate` do nothing on it), from one shared no-op object. Set
    attributes known only later with :func:`annotate`, which checks them as this call does. An
    exception inside the block is recorded on the span with error status and re-raised; the
    span is always ended.

    Raises:
        SpecError: only in strict mode, for an undeclared name or attribute, or a wrong type.
    """
    try:
        gate = _gates.get(name, _default)
    except TypeError:  # an unhashable name; zero cost on the hot path otherwise
        raise TypeError(
            f"span() takes the span name as a string such as 'db.query.execute', "
            f"not a {type(name).__name__}"
        ) from None
    if gate is NOOP:
        return NOOP
    if gate is _UNDECLARED:
        gate = _undeclared(name)
    return gate.live(gate, attributes, links)


def annotate(span: Span, /, **attributes: Any) -> None:
    """Set attributes known only once a block has run (a reward mean, a byte count) on ``span``,
    the span a ``with span(...) as s`` block gave.

    The attributes go through the same checks as :func:`span`'s keyword attributes, against the
    registry entry of the span's name: undeclared keys and values of the wrong type (or outside
    ``allowed``) are dropped with a one-time warning, sensitive values are redacted here, at
    source. On a span that does not record (its group is off, or spanspec is not active: the
    non-recording span a disabled site gives) it does nothing, at the cost of one call.

    Raises:
        SpecError: only in strict mode, for an undeclared key, a wrong type, or a span that is
            not one of the registry's.
    """
    name = getattr(span, "name", None)
    gate = _gates.get(name) if type(name) is str else None
    if type(gate) is _Gate and _direct.get(type(span)):
        # the common case (a declared span of a group that is on, an SDK span): _set_directly()
        # sets nothing on an ended span, as on any that is not recording
        if attributes:
            cleaned = gate.clean(attributes)  # the caller's own dict back: all exact scalars
            if not _set_directly(span, cleaned, cleaned is attributes):
                span.set_attributes(cleaned)
        return
    if not span.is_recording():
        return
    if not isinstance(gate, _Gate):
        gate = _undeclared_gates.get(name) if isinstance(name, str) else None
    if gate is None:
        message = (
            f"annotate(): span {name!r} is not a span of the active registry; attributes not set"
        )
        if _strict:
            raise SpecError([Finding("span.undeclared", message, file="<runtime>")])
        with _warn_lock:
            if (str(name), "") not in _warned:
                _warned.add((str(name), ""))
                _log.warning(message)
        return
    if attributes:
        cleaned = gate.clean(attributes)
        # the caller's own dict back: every value declared and of its exact (scalar) type
        _set_attributes(span, cleaned, cleaned is attributes)


# -- attributes set on a started span ---------------------------------------------------------
# The SDK's Span.set_attributes checks every value again (abstract-class isinstance tests: about
# 2 µs for three numbers on a slow core) after annotate() has checked each against the
# registry. So, for a span class whose public call was seen to store checked values as they
# are, the values go straight into its attribute dict under its lock, by the SDK's own rules:
# an ended span, a count limit that could drop one, a length limit on strings or a value that
# is not a plain scalar takes the public call (which warns, drops and counts). Span class ->
# True (direct), False (public call only); absent: not seen yet.
_direct: dict[type, bool] = {}
_SCALARS = frozenset((str, int, float, bool))


def _set_attributes(span: Span, attributes: dict[str, Any], scalars: bool = False) -> None:
    """``span.set_attributes(attributes)`` of checked values (``scalars``: all of them ``str``,
    ``int``, ``float`` or ``bool``); nothing on a span that no longer records (ended at
    shutdown, or by another thread: the SDK's own call would warn)."""
    direct = _direct.get(type(span))
    if direct and _set_directly(span, attributes, scalars):
        return  # stored, or the span had ended: nothing to set
    if not span.is_recording():
        return
    span.set_attributes(attributes)
    if direct is None:
        learned = _stored_as_given(span, attributes)
        if learned is not None:
            _direct[type(span)] = learned


def _stored_as_given(span: Any, attributes: dict[str, Any]) -> bool | None:
    """Whether ``span`` is built as :func:`_set_directly` expects (the OpenTelemetry SDK's
    span: a lock, an end time, a ``BoundedAttributes``) and its public call just stored
    ``attributes`` as they are; None when this call cannot tell (an ended span, a limit)."""
    try:
        held = span._attributes
        stored, limit = held._dict, held.maxlen
        if not callable(span._lock.__enter__) or not isinstance(stored, dict):
            return False
        if (
            span._end_time is not None
            or held.max_value_len is not None
            or (limit is not None and len(stored) >= limit)
        ):
            return None
        if any(type(v) not in _SCALARS for v in attributes.values()):
            return None
        return all(stored.get(k) is v for k, v in attributes.items())
    except Exception:  # not the SDK's span: the public call, always
        return False


def _set_directly(span: Any, attributes: dict[str, Any], scalars: bool) -> bool:
    with span._lock:
        if span._end_time is not None:
            return True  # not recording: nothing to set (the public call would warn)
        held = span._attributes
        stored, limit = held._dict, held.maxlen
        if held.max_value_len is not None or (
            limit is not None and len(stored) + len(attributes) > limit
        ):
            return False
        if not scalars:
            for value in attributes.values():
                if type(value) not in _SCALARS:
                    return False
        stored.update(attributes)
    return True


def _undeclared(name: str) -> _Gate:
    # A name that is not UTF-8 text (span(123), a path decoded with os.fsdecode) is emitted as
    # repaired text by the exporters (see spanspec._text.repair); a long one is shown by its
    # head only.
    text, repaired = repair(name)
    message = f"span {shorten(text)!r} is not declared in the registry" + (
        f" (and not text: emitted as {shorten(text)!r})" if repaired else ""
    )
    if _strict:
        raise SpecError([Finding("span.undeclared", message, file="<runtime>")])
    with _lock:
        gate = _undeclared_gates.get(name)
        if gate is None:
            assert _tracer is not None
            gate = _undeclared_gates[name] = _Gate(name, None, _tracer, strict=False)
            _log.warning(
                "%s; emitting it without attributes (declare it in %s)",
                message,
                _spec.source if _spec else "the registry",
            )
    return gate


def traced(name: str, /, **attributes: Any) -> Callable[[F], F]:
    """Decorate a function, coroutine function or generator function with ``span(name)``.

    The gate is checked at each call, so activation after decoration takes effect. A coroutine's
    span ends when the coroutine finishes (not when it is created); a generator's span covers
    its whole iteration and is current only while the generator body runs.
    """

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
                with span(name, **attributes):
                    return await fn(*args, **kwargs)

            return coroutine_wrapper  # type: ignore[return-value]
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                live = span(name, **attributes)
                if live is NOOP:
                    return (yield from fn(*args, **kwargs))
                started = cast(_LiveSpan, live).start()
                return (yield from _traced_generator(started, fn(*args, **kwargs)))

            return generator_wrapper  # type: ignore[return-value]
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def async_generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                live = span(name, **attributes)
                if live is NOOP:
                    async for item in fn(*args, **kwargs):
                        yield item
                    return
                otel_span = cast(_LiveSpan, live).start()
                try:
                    async for item in fn(*args, **kwargs):
                        yield item
                except BaseException as exc:
                    if not isinstance(exc, GeneratorExit):
                        _fail(otel_span, exc)
                    raise
                finally:
                    otel_span.end()

            return async_generator_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with span(name, **attributes):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _traced_generator(otel_span: Span, gen: Any) -> Any:
    """Drive ``gen`` with ``otel_span`` current only while its body runs; end the span at the end."""
    to_send: Any = None
    to_throw: BaseException | None = None
    try:
        while True:
            token = otel_context.attach(trace.set_span_in_context(otel_span))
            try:
                value = gen.send(to_send) if to_throw is None else gen.throw(to_throw)
            finally:
                otel_context.detach(token)
            to_throw = None
            try:
                to_send = yield value
            except GeneratorExit:
                gen.close()
                raise
            except BaseException as exc:
                to_throw, to_send = exc, None
    except StopIteration as stop:
        return stop.value
    except GeneratorExit:
        raise
    except BaseException as exc:
        _fail(otel_span, exc)
        raise
    finally:
        otel_span.end()


def activate(
    spec: Spec,
    groups: str | None = "default",
    tracer_provider: trace.TracerProvider | None = None,
    strict: bool = False,
    env_var: str | None = FROM_CONVENTIONS,
) -> frozenset[str]:
    """Switch on the spans of ``spec`` whose group ``groups`` enables; return the enabled groups.

    A non-empty ``$<env_var>`` overrides ``groups``: by default the registry's
    ``$<env_prefix>SPAN_GROUPS`` (``spec.conventions.groups_variable``; none when the registry
    declares no prefix), ``None`` for no override. Spans go to ``tracer_provider``, or to the
    global OpenTelemetry provider when None.

    Raises:
        SpecError: for an unknown group or preset; nothing changes then.
    """
    global _gates, _default, _spec, _groups, _tracer, _strict, _sensitive
    if env_var is FROM_CONVENTIONS:
        env_var = spec.conventions.groups_variable
    override = os.environ.get(env_var, "").strip() if env_var else ""
    expression = override or groups
    try:
        enabled = spec.resolve(expression)
    except SpecError as exc:
        where = f"${env_var}" if override else "groups"
        raise SpecError(
            [
                Finding(f.id, f"{where}={expression!r}: {f.message}", f.level, f.file)
                for f in exc.findings
            ]
        ) from None
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    tracer = provider.get_tracer("spanspec", schema_url=None)
    c = spec.conventions
    measure = (c.cpu_attribute, c.rss_peak_attribute, c.rss_rise_attribute)
    if not usage.MEASURABLE:
        measure = ()
    gates = {
        name: _Gate(name, entry, tracer, strict, measure) if entry.group in enabled else NOOP
        for name, entry in spec.spans.items()
    }
    with _lock:
        _undeclared_gates.clear()
        _spec, _groups, _tracer, _strict = spec, enabled, tracer, strict
        _gates = gates
        _default = _UNDECLARED
        _sensitive = _sensitive | {k for k, a in spec.attributes.items() if a.sensitive}
    return enabled


def deactivate() -> None:
    """Put every site back to the shared no-op and forget the active spec and warnings."""
    global _gates, _default, _spec, _groups, _tracer, _strict
    with _lock:
        _default = NOOP
        _gates = {}
        _spec, _groups, _tracer, _strict = None, frozenset(), None, False
        _undeclared_gates.clear()
    with _warn_lock:
        _warned.clear()


def is_active() -> bool:
    """Whether :func:`activate` is in force."""
    return _spec is not None


def active_spec() -> Spec | None:
    """The spec passed to :func:`activate`, or None."""
    return _spec


def enabled_groups() -> frozenset[str]:
    """Groups switched on by the last :func:`activate` (empty when inactive)."""
    return _groups


def enabled_span_names() -> frozenset[str]:
    """Declared span names that currently emit."""
    return frozenset(name for name, gate in _gates.items() if gate is not NOOP)
