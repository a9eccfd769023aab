"""spanspec.runtime: the gate, attributes, errors, traced(), activation and the env override."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import spanspec
from spanspec import runtime
from spanspec.testing import capture

ROLLOUT = "rl.grpo.rollout"


def own(span) -> dict:
    """A span's attributes less the registry's constant kind (tested on its own below)."""
    return {k: v for k, v in span.attributes.items() if k != "openinference.span.kind"}


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NEMO_RL_OTEL_SPAN_GROUPS", raising=False)
    yield
    spanspec.deactivate()


def test_before_activate_every_site_is_the_shared_noop():
    first = spanspec.span(ROLLOUT, **{"rl.iteration": 1})
    second = spanspec.span("not.declared.anywhere")
    assert first is second is runtime.NOOP
    with first as s:
        # OpenTelemetry's own non-recording span: late attributes and links need no None check.
        assert s is trace.INVALID_SPAN and not s.is_recording()
        s.set_attribute("anything", 1)
        spanspec.annotate(s, **{"rl.reward.mean": 0.5})
    assert not runtime.is_active()


def test_group_off_returns_noop_and_emits_nothing(spec):
    with capture(spec, groups="default") as spans:
        assert spanspec.span(ROLLOUT) is runtime.NOOP
        with spanspec.span(ROLLOUT) as s:
            assert s is trace.INVALID_SPAN and not s.is_recording()
            spanspec.annotate(s, **{"undeclared.key": 1})  # off: not even checked
        with spanspec.span("rl.grpo.checkpoint", **{"rl.iteration": 0}):
            pass
    assert spans.names() == ["rl.grpo.checkpoint"]


def test_enabled_span_is_current_with_declared_attributes_and_parent(spec):
    with capture(spec, groups="per_step") as spans:
        with spanspec.span("rl.grpo.step", **{"rl.iteration": 3}) as step:
            assert trace.get_current_span() is step
            with spanspec.span(ROLLOUT, **{"rl.iteration": 3, "rl.num_generations_per_prompt": 8}):
                pass
        assert trace.get_current_span() is trace.INVALID_SPAN
    rollout, root = spans.one(ROLLOUT), spans.one("rl.grpo.step")
    assert dict(rollout.attributes) == {
        "rl.iteration": 3,
        "rl.num_generations_per_prompt": 8,
        "openinference.span.kind": "CHAIN",  # the registry's constant for its group
    }
    assert rollout.parent.span_id == root.context.span_id
    assert rollout.context.trace_id == root.context.trace_id
    assert root.parent is None


def test_links_point_to_spans_of_other_traces(spec):
    with capture(spec, groups="per_step") as spans:
        with spanspec.span(ROLLOUT, **{"rl.iteration": 0}) as first:
            pass
        with spanspec.span(ROLLOUT, **{"rl.iteration": 1}) as second:
            pass
        link = trace.Link(second.get_span_context())
        with spanspec.span(
            "rl.grpo.step", links=[first.get_span_context(), link], **{"rl.iteration": 1}
        ):
            pass
    step = spans.one("rl.grpo.step")
    assert [x.context.span_id for x in step.links] == [
        first.get_span_context().span_id,
        second.get_span_context().span_id,
    ]
    assert step.context.trace_id != first.get_span_context().trace_id  # a link, not a parent
    assert own(step) == {"rl.iteration": 1}


def test_exception_is_recorded_with_error_status_and_reraised(spec):
    with capture(spec, groups="all") as spans:
        with pytest.raises(ZeroDivisionError):
            with spanspec.span(ROLLOUT, **{"rl.iteration": 0}):
                1 / 0  # noqa: B018
    failed = spans.one(ROLLOUT)
    assert failed.status.status_code is StatusCode.ERROR
    assert "ZeroDivisionError" in failed.status.description
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.end_time is not None


def test_strict_rejects_undeclared_name_attribute_and_type(spec):
    with capture(spec, groups="all", strict=True):
        with pytest.raises(
            spanspec.SpecError, match=re.escape("span 'rl.grpo.nope' is not declared")
        ):
            spanspec.span("rl.grpo.nope")
        with pytest.raises(
            spanspec.SpecError, match=re.escape("attribute 'rl.colour' is not declared")
        ):
            with spanspec.span(ROLLOUT, **{"rl.colour": "red"}):
                pass
        with pytest.raises(spanspec.SpecError, match="must be an int, got str '3'"):
            with spanspec.span(ROLLOUT, **{"rl.iteration": "3"}):
                pass


def test_lenient_mode_warns_once_drops_bad_attributes_and_still_emits(spec, caplog):
    caplog.set_level(logging.WARNING, logger="spanspec")
    with capture(spec, groups="all", strict=False) as spans:
        for _ in range(3):
            with spanspec.span(
                ROLLOUT, **{"rl.iteration": "x", "rl.colour": 1, "rl.batch_size": 4}
            ):
                pass
            with spanspec.span("my.custom.span", **{"a": 1}):
                pass
    assert spans.names().count(ROLLOUT) == 3
    assert all(own(s) == {"rl.batch_size": 4} for s in spans.named(ROLLOUT))
    assert [dict(s.attributes) for s in spans.named("my.custom.span")] == [{}, {}, {}]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("'rl.colour' is not declared" in m for m in messages) == 1
    assert sum("'rl.iteration' must be an int" in m for m in messages) == 1
    assert any(m.endswith("(dropped; declare it in the registry)") for m in messages)
    assert any(
        m.endswith("got str 'x' (dropped; pass a value of the declared type)") for m in messages
    )
    assert sum("span 'my.custom.span' is not declared" in m for m in messages) == 1


def test_sensitive_attribute_is_redacted_and_allowed_values_enforced(spec):
    with capture(spec, groups="all", strict=True) as spans:
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "enduser.id": "alice"}):
            pass
        with pytest.raises(spanspec.SpecError, match=re.escape("rl.algorithm")):
            with spanspec.span("rl.grpo.job", **{"rl.algorithm": "sac"}):
                pass
        with spanspec.span(
            "rl.vllm.generate_text", **{"gen_ai.system": "vllm", "gen_ai.prompt": ["2+2="]}
        ):
            pass
    assert own(spans.one("rl.grpo.job")) == {
        "rl.algorithm": "grpo",
        "enduser.id": "[REDACTED]",
    }
    assert spans.one("rl.vllm.generate_text").attributes["gen_ai.prompt"] == "[REDACTED]"


def test_annotate_checks_late_attributes_as_span_does(spec):
    with capture(spec, groups="all", strict=True) as spans:
        with spanspec.span("rl.grpo.reward", **{"rl.iteration": 2}) as s:
            spanspec.annotate(s, **{"rl.reward.mean": 0.25})
            with pytest.raises(
                spanspec.SpecError,
                match=re.escape("span 'rl.grpo.reward': attribute 'rl.colour' is not declared"),
            ):
                spanspec.annotate(s, **{"rl.colour": "red"})
            with pytest.raises(spanspec.SpecError, match="must be a float, got str 'high'"):
                spanspec.annotate(s, **{"rl.reward.mean": "high"})
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo"}) as job:
            spanspec.annotate(job, **{"enduser.id": "alice", "rl.max_steps": 3})
            with pytest.raises(spanspec.SpecError, match=re.escape("rl.algorithm")):
                spanspec.annotate(job, **{"rl.algorithm": "sac"})  # outside `allowed`
    assert own(spans.one("rl.grpo.reward")) == {
        "rl.iteration": 2,
        "rl.reward.mean": 0.25,
    }
    # Redacted at source: the sensitive value never reaches the span, whatever exports it.
    assert own(spans.one("rl.grpo.job")) == {
        "rl.algorithm": "grpo",
        "enduser.id": "[REDACTED]",
        "rl.max_steps": 3,
    }


def test_annotate_lenient_drops_bad_keys_with_one_warning(spec, caplog):
    caplog.set_level(logging.WARNING, logger="spanspec")
    with capture(spec, groups="all", strict=False) as spans:
        for mean in (0.5, 0.75):
            with spanspec.span("rl.grpo.reward", **{"rl.iteration": 0}) as s:
                spanspec.annotate(s, **{"rl.reward.mean": mean, "rl.colour": "red"})
    assert [s.attributes["rl.reward.mean"] for s in spans.named("rl.grpo.reward")] == [0.5, 0.75]
    assert all("rl.colour" not in s.attributes for s in spans.named("rl.grpo.reward"))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("'rl.colour' is not declared" in m for m in messages) == 1


def test_annotate_refuses_a_span_that_is_not_the_registrys(spec):
    provider = TracerProvider()
    foreign = provider.get_tracer("other").start_span("not.from.spanspec")
    with capture(spec, groups="all", strict=True):
        with pytest.raises(spanspec.SpecError, match="not a span of the active registry"):
            spanspec.annotate(foreign, **{"rl.iteration": 1})
    foreign.end()
    assert "rl.iteration" not in foreign.attributes


def test_numeric_types_are_coerced_but_bool_is_not_an_int(spec):
    np = pytest.importorskip("numpy")
    with capture(spec, groups="all", strict=True) as spans:
        with spanspec.span(ROLLOUT, **{"rl.iteration": np.int64(4)}):
            pass
        with spanspec.span("rl.grpo.reward", **{"rl.iteration": 1, "rl.reward.mean": 1}):
            pass
        with pytest.raises(spanspec.SpecError):
            with spanspec.span(ROLLOUT, **{"rl.iteration": True}):
                pass
    assert spans.one(ROLLOUT).attributes["rl.iteration"] == 4
    assert type(spans.one(ROLLOUT).attributes["rl.iteration"]) is int
    mean = spans.one("rl.grpo.reward").attributes["rl.reward.mean"]
    assert mean == 1.0 and type(mean) is float  # a float attribute is exported as a double


def test_traced_checks_the_gate_at_call_time(spec):
    @spanspec.traced(ROLLOUT, **{"rl.iteration": 7})
    def work(x: int) -> int:
        return x * 2

    assert work(2) == 4  # inactive: runs untraced
    assert work.__name__ == "work"
    with capture(spec, groups="all") as spans:
        assert work(3) == 6
    assert spans.one(ROLLOUT).attributes["rl.iteration"] == 7


def test_traced_coroutine_span_covers_the_await_not_the_creation(spec):
    @spanspec.traced(ROLLOUT, **{"rl.iteration": 0})
    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "done"

    with capture(spec, groups="all") as spans:
        coro = slow()
        assert spans.names() == []  # created, not yet run
        assert asyncio.run(coro) == "done"
    (done,) = spans.named(ROLLOUT)
    assert (done.end_time - done.start_time) / 1e9 >= 0.045


def test_traced_generator_spans_whole_iteration_and_is_current_only_inside(spec):
    seen = []

    @spanspec.traced(ROLLOUT, **{"rl.iteration": 0})
    def numbers(n: int):
        for i in range(n):
            seen.append(trace.get_current_span().get_span_context().span_id)
            yield i
        return "end"

    with capture(spec, groups="all") as spans:
        gen = numbers(3)
        assert next(gen) == 0
        # Between items the caller's context is its own, not the generator's span.
        assert trace.get_current_span() is trace.INVALID_SPAN
        assert list(gen) == [1, 2]
    (whole,) = spans.named(ROLLOUT)
    assert set(seen) == {whole.context.span_id}


def test_traced_generator_error_and_early_close(spec):
    @spanspec.traced(ROLLOUT, **{"rl.iteration": 0})
    def broken():
        yield 1
        raise ValueError("bad item")

    @spanspec.traced("rl.grpo.reward", **{"rl.iteration": 0})
    def endless():
        while True:
            yield 1

    with capture(spec, groups="all") as spans:
        with pytest.raises(ValueError):
            list(broken())
        gen = endless()
        next(gen)
        gen.close()
    assert spans.one(ROLLOUT).status.status_code is StatusCode.ERROR
    assert spans.one("rl.grpo.reward").status.status_code is StatusCode.UNSET


def test_span_inside_a_generator_closed_early_is_not_an_error(spec):
    def batches():
        with spanspec.span(ROLLOUT, **{"rl.iteration": 0}):
            while True:
                yield 1

    with capture(spec, groups="all") as spans:
        gen = batches()
        next(gen)
        gen.close()  # GeneratorExit passes through the with block: a normal end, not a failure
    span = spans.one(ROLLOUT)
    assert span.status.status_code is StatusCode.UNSET and not span.events


def test_traced_async_generator(spec):
    @spanspec.traced(ROLLOUT, **{"rl.iteration": 0})
    async def agen():
        for i in range(2):
            await asyncio.sleep(0)
            yield i

    async def consume():
        return [i async for i in agen()]

    with capture(spec, groups="all") as spans:
        assert asyncio.run(consume()) == [0, 1]
    assert spans.names() == [ROLLOUT]


def test_env_var_overrides_groups_and_bad_expression_changes_nothing(spec, monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setenv("NEMO_RL_OTEL_SPAN_GROUPS", "rollout")
    assert spanspec.activate(spec, groups="all", tracer_provider=provider) == {"rollout"}
    assert runtime.enabled_span_names() == spec.enabled_spans("rollout")
    monkeypatch.setenv("NEMO_RL_OTEL_SPAN_GROUPS", "per_stp")
    with pytest.raises(
        spanspec.SpecError, match=r"\$NEMO_RL_OTEL_SPAN_GROUPS='per_stp'.*did you mean 'per_step'"
    ):
        spanspec.activate(spec, groups="all", tracer_provider=provider)
    assert runtime.enabled_groups() == {"rollout"}  # the failed activation left the old one
    monkeypatch.setenv("OTHER_VAR", "checkpoint")
    assert spanspec.activate(spec, groups="all", tracer_provider=provider, env_var="OTHER_VAR") == {
        "checkpoint"
    }


def test_the_override_variable_is_the_registrys(spec, monkeypatch):
    import dataclasses

    from spanspec.spec import Conventions

    provider = TracerProvider()
    assert spec.conventions.groups_variable == "NEMO_RL_OTEL_SPAN_GROUPS"
    monkeypatch.setenv("NEMO_RL_OTEL_SPAN_GROUPS", "rollout")
    monkeypatch.setenv("SHOP_OTEL_SPAN_GROUPS", "checkpoint")
    shop = dataclasses.replace(spec, conventions=Conventions(env_prefix="SHOP_OTEL_"))
    assert spanspec.activate(shop, groups="all", tracer_provider=provider) == {"checkpoint"}
    # A registry with no prefix has no override variable; env_var=None switches it off.
    plain = dataclasses.replace(spec, conventions=Conventions())
    assert spanspec.activate(plain, groups="evaluate", tracer_provider=provider) == {"evaluate"}
    assert spanspec.activate(spec, groups="evaluate", tracer_provider=provider, env_var=None) == {
        "evaluate"
    }
    assert not hasattr(runtime, "DEFAULT_ENV_VAR")


def test_deactivate_returns_every_site_to_noop(spec):
    with capture(spec, groups="all"):
        assert spanspec.span(ROLLOUT) is not runtime.NOOP
    assert spanspec.span(ROLLOUT) is runtime.NOOP
    assert runtime.active_spec() is None


def test_span_uses_global_provider_when_none_given(spec):
    # The API's proxy provider without an SDK: spans are non-recording but the API works.
    spanspec.activate(spec, groups="all")
    with spanspec.span(ROLLOUT, **{"rl.iteration": 0}) as s:
        assert not s.is_recording()


def _exit_in_thread(block) -> None:
    t = threading.Thread(target=block.__exit__, args=(None, None, None))
    t.start()
    t.join()


def test_a_span_ended_in_another_thread_is_ended_and_no_current_span_is_corrupted(spec, caplog):
    before = runtime.spans_ended_in_another_thread()
    with capture(spec, groups="per_step") as spans, caplog.at_level(logging.WARNING):
        with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}) as step:
            for i in range(3):  # entered here, ended by another thread
                block = spanspec.span(ROLLOUT, **{"rl.iteration": i})
                handed = block.__enter__()
                seen_there = []
                t = threading.Thread(
                    target=lambda b=block, seen=seen_there: (
                        b.__exit__(None, None, None),
                        seen.append(trace.get_current_span()),
                    )
                )
                t.start()
                t.join()
                # the ending thread's own context is untouched
                assert seen_there == [trace.INVALID_SPAN]
                assert not handed.is_recording()  # ended
                # this thread's next span sees the right parent, and its exit the right current
                with spanspec.span("rl.grpo.reward", **{"rl.iteration": i}) as reward:
                    assert trace.get_current_span() is reward
                assert trace.get_current_span() is step
        assert trace.get_current_span() is trace.INVALID_SPAN
    step_id = spans.one("rl.grpo.step").context.span_id
    assert len(spans.named(ROLLOUT)) == 3
    assert all(s.parent.span_id == step_id for s in spans.named("rl.grpo.reward"))
    assert runtime.spans_ended_in_another_thread() == before + 3
    lines = [r for r in caplog.records if "ended in another" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


def test_a_nested_span_still_open_keeps_its_place_when_its_parent_is_ended_elsewhere(spec):
    with capture(spec, groups="per_step") as spans:
        outer = spanspec.span("rl.grpo.step", **{"rl.iteration": 0})
        outer.__enter__()
        with spanspec.span(ROLLOUT, **{"rl.iteration": 0}) as inner:
            _exit_in_thread(outer)  # the parent is ended while this one is still open
            assert trace.get_current_span() is inner
        # the inner exit restores what it found, then the ended parent is popped too
        assert trace.get_current_span() is trace.INVALID_SPAN
    assert sorted(spans.names()) == sorted(["rl.grpo.step", ROLLOUT])


def test_a_span_exited_in_another_asyncio_task_is_ended_without_a_traceback(spec, caplog):
    async def main() -> None:
        block = spanspec.span(ROLLOUT, **{"rl.iteration": 0})
        entered = asyncio.get_running_loop().create_future()

        async def enter() -> None:
            entered.set_result(block.__enter__())

        async def leave() -> None:
            await entered
            block.__exit__(None, None, None)  # another task: another context, same thread
            assert trace.get_current_span() is trace.INVALID_SPAN

        await asyncio.gather(enter(), leave())
        assert not entered.result().is_recording()

    with capture(spec, groups="per_step") as spans, caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert spans.names() == [ROLLOUT]
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert any("ended in another" in r.getMessage() for r in caplog.records)


def test_a_spans_constants_are_set_at_its_start_over_the_callers(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(
        "version: 1\n"
        "groups: {step: {description: One step., constants: {kind: CHAIN}}}\n"
        "attributes:\n"
        "  kind: {type: string, brief: A backend's kind., allowed: [CHAIN, LLM]}\n"
        "  n: {type: int, brief: A number.}\n"
        "spans:\n"
        "  - {name: app.step, group: step, brief: A step., attributes: {n: required}}\n"
        "  - {name: app.call, group: step, brief: A call., constants: {kind: LLM}}\n"
    )
    with capture(spanspec.load(path), groups="step") as spans:
        with spanspec.span("app.step", n=1):
            with spanspec.span("app.call"):
                pass
            with spanspec.span("app.call", kind="CHAIN"):  # a constant is not the caller's
                pass
    assert dict(spans.one("app.step").attributes) == {"n": 1, "kind": "CHAIN"}
    assert [dict(s.attributes) for s in spans.named("app.call")] == [{"kind": "LLM"}] * 2


def unmeasured(spec: spanspec.Spec) -> spanspec.Spec:
    """``spec`` without its usage conventions: the runtime measures nothing (its worker spans
    would get rl.cpu.seconds and rl.memory.* set as they end)."""
    return dataclasses.replace(spec, conventions=spanspec.spec.Conventions())


def _annotated(spec, limits, name: str, start: dict, late: list[dict]) -> tuple[dict, int]:
    """(attributes, dropped) of a span ``name`` annotated with each of ``late`` in turn, under
    the SDK's ``limits``: through spanspec, or (``spec`` a dict: the registry's constants)
    through the raw SDK's own calls."""
    from opentelemetry.sdk.trace import SpanLimits

    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(**limits))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if isinstance(spec, dict):
        span = provider.get_tracer("raw").start_span(name, attributes={**start, **spec})
        for attributes in late:
            span.set_attributes(attributes)
        span.end()
    else:
        spanspec.activate(spec, groups="all", tracer_provider=provider, env_var=None)
        with spanspec.span(name, **start) as span:
            for attributes in late:
                spanspec.annotate(span, **attributes)
        spanspec.deactivate()
    (done,) = exporter.get_finished_spans()
    return {k: v for k, v in done.attributes.items() if k != "openinference.span.kind"}, (
        done.dropped_attributes
    )


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_span_attributes": 4}, {"max_span_attributes": 1}, {"max_attribute_length": 2}],
)
def test_late_attributes_keep_the_sdks_limits_and_count_what_they_drop(spec, limits):
    # annotate() stores checked values straight into an SDK span once it has seen the SDK store
    # them as given; these limits must still truncate and drop (and count) as the SDK does.
    spec = unmeasured(spec)
    micro = "rl.worker.train_microbatch"
    work = {"rl.num_tokens": 64, "rl.flops": 6_000_000, "rl.tokens_per_second": 10.5}
    late = [work, {"rl.cpu.seconds": 0.25, "rl.num_tokens": 65}]  # a key set again: the last
    for _ in range(2):  # the first call teaches annotate() the span class; the second uses it
        ours = _annotated(spec, limits, micro, {"rl.micro_batch": 0}, late)
    raw = dict(spec.spans[micro].constants)  # spanspec starts a span with them
    assert ours == _annotated(raw, limits, micro, {"rl.micro_batch": 0}, late)
    job = {"rl.algorithm": "grpo"}
    ours = _annotated(spec, limits, "rl.grpo.job", job, [{"rl.algorithm": "dpo"}])
    raw = dict(spec.spans["rl.grpo.job"].constants)
    assert ours == _annotated(raw, limits, "rl.grpo.job", job, [{"rl.algorithm": "dpo"}])
    if limits.get("max_attribute_length"):
        assert ours[0]["rl.algorithm"] == "dp"  # truncated, as the SDK does


def test_annotate_on_an_ended_span_sets_nothing_and_says_nothing(spec, caplog):
    caplog.set_level(logging.WARNING)
    with capture(unmeasured(spec), groups="all") as spans:
        for _ in range(2):  # the second time, on the direct path
            with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": 0}) as s:
                spanspec.annotate(s, **{"rl.num_tokens": 1})
            spanspec.annotate(s, **{"rl.flops": 5})
    assert [own(s) for s in spans.all()] == [{"rl.micro_batch": 0, "rl.num_tokens": 1}] * 2
    assert caplog.records == []
