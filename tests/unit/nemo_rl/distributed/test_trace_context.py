"""Trace context crosses every driver -> actor call: real Ray actors, spans exported from the
workers' own processes to an OTLP-JSON file, the driver's spans captured in memory."""

import asyncio
import json
import sys
from pathlib import Path

import pytest
import ray

import spanspec
from nemo_rl.distributed import (
    RankInfo,
    call,
    carries_trace,
    close_worker,
    init_worker,
    spawn_actor,
)
from spanspec.testing import capture

pytestmark = pytest.mark.ray
# Test modules are not importable in Ray's worker processes: ship these classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SyncWorker:
    def __init__(self, rank: int, world_size: int) -> None:
        init_worker(RankInfo("policy", rank, world_size))
        self.rank = rank

    @carries_trace
    def work(self, n: int) -> int:
        with spanspec.span(
            "rl.worker.logprob", **{"rl.batch_size": n, "rl.worker.rank": self.rank}
        ):
            return n * 2

    @carries_trace
    def relay(self, other, n: int) -> int:
        # Runs on a rank that does not export: the context must still reach `other`.
        with spanspec.span(
            "rl.worker.logprob", **{"rl.batch_size": n, "rl.worker.rank": self.rank}
        ):
            return ray.get(call(other.work, n))

    def exporting(self) -> bool:
        from nemo_rl.telemetry import get_telemetry

        return get_telemetry().is_exporting

    def close(self) -> None:
        close_worker()


class AsyncWorker:
    def __init__(self, rank: int, world_size: int) -> None:
        init_worker(RankInfo("generation", rank, world_size))

    @carries_trace
    async def work(self, n: int) -> int:
        with spanspec.span(
            "rl.worker.generate",
            **{"gen_ai.provider.name": "torch", "gen_ai.operation.name": "text_completion"},
        ):
            await asyncio.sleep(0.01)  # yield to the loop inside the span
            return n + 1

    async def close(self) -> None:
        close_worker()


class LoadingWorker:
    @carries_trace
    def __init__(self, rank: int, world_size: int) -> None:
        init_worker(RankInfo("generation", rank, world_size))
        with spanspec.span("rl.vllm.load_model", **{"gen_ai.request.model": "tiny"}):
            pass

    def close(self) -> None:
        close_worker()


def _worker_env(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    # What init_telemetry_driver writes for the workers; spawn_actor forwards it via runtime_env.
    for key, value in {
        "ENABLED": "true",
        "EXPORTER": "file",
        "FILE_DIR": str(folder),
        "SPAN_GROUPS": "all",
        "RUN_ID": "trace-context-test",
        "EXPORT_STRATEGY": "single_rank",
        "EXPORT_RANK": "0",
        "METRICS_ENABLED": "false",
    }.items():
        monkeypatch.setenv(f"NEMO_RL_OTEL_{key}", value)


def _exported_spans(path: Path) -> list[dict]:
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                spans.extend(ss.get("spans", []))
    return spans


def test_worker_spans_are_children_of_the_driver_span(ray_cluster, tmp_path, monkeypatch):
    _worker_env(monkeypatch, tmp_path)
    exporter_rank = spawn_actor(SyncWorker, 0, 2, num_cpus=0.1)
    async_rank = spawn_actor(AsyncWorker, 0, 2, num_cpus=0.1)
    quiet_rank = spawn_actor(SyncWorker, 1, 2, num_cpus=0.1)
    assert ray.get(exporter_rank.exporting.remote()) is True
    assert ray.get(quiet_rank.exporting.remote()) is False

    with capture(groups="all") as driver:
        with spanspec.span("rl.grpo.logprob", **{"rl.iteration": 0}):
            assert ray.get(call(exporter_rank.work, 3)) == 6
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 0}):
            assert ray.get(call(async_rank.work, 3)) == 4
        with spanspec.span("rl.grpo.policy_update", **{"rl.iteration": 0}):
            assert ray.get(call(quiet_rank.relay, exporter_rank, 5)) == 10
        by_name = {s.name: s for s in driver}

    ray.get([a.close.remote() for a in (exporter_rank, async_rank, quiet_rank)])
    for a in (exporter_rank, async_rank, quiet_rank):
        ray.kill(a)

    worker = _exported_spans(tmp_path / "traces.jsonl")
    # Only rank 0 exports: three worker spans (the relaying rank's own span is not recorded).
    assert sorted(s["name"] for s in worker) == [
        "rl.worker.generate",
        "rl.worker.logprob",
        "rl.worker.logprob",
    ]

    def parent_of(driver_name: str, worker_name: str) -> dict:
        d = by_name[driver_name].context
        matches = [
            s
            for s in worker
            if s["name"] == worker_name and s["parentSpanId"] == f"{d.span_id:016x}"
        ]
        assert len(matches) == 1, (driver_name, worker)
        assert matches[0]["traceId"] == f"{d.trace_id:032x}"
        return matches[0]

    parent_of("rl.grpo.logprob", "rl.worker.logprob")  # sync method
    parent_of("rl.grpo.generation", "rl.worker.generate")  # async method
    parent_of("rl.grpo.policy_update", "rl.worker.logprob")  # through the non-exporting rank


def test_a_constructor_that_carries_trace_runs_under_the_spawning_span(
    ray_cluster, tmp_path, monkeypatch
):
    _worker_env(monkeypatch, tmp_path)
    with capture(groups="all") as driver:
        with spanspec.span("rl.grpo.model_init", **{"rl.model": "tiny"}):
            loader = spawn_actor(LoadingWorker, 0, 1, num_cpus=0.1)
            ray.get(loader.close.remote())
        (init,) = [s for s in driver if s.name == "rl.grpo.model_init"]
    ray.kill(loader)
    (load,) = _exported_spans(tmp_path / "traces.jsonl")
    assert load["name"] == "rl.vllm.load_model"
    assert load["parentSpanId"] == f"{init.context.span_id:016x}"
    assert load["traceId"] == f"{init.context.trace_id:032x}"


def test_methods_run_unchanged_without_a_carrier():
    w = SyncWorker.__new__(SyncWorker)
    w.rank = 0
    assert w.work(2) == 4
    assert asyncio.run(AsyncWorker.work(AsyncWorker.__new__(AsyncWorker), 1)) == 2


def test_call_refuses_a_hand_made_carrier():
    class _Method:
        def remote(self, *a, **kw):
            raise AssertionError("not reached")

    with pytest.raises(TypeError, match="_trace_carrier"):
        call(_Method(), _trace_carrier={})


def test_generator_methods_are_rejected():
    with pytest.raises(TypeError, match="generator"):

        @carries_trace
        def gen(self):
            yield 1


def test_every_worker_request_carries_the_trace_context():
    # A driver call into a method without @carries_trace would silently start a new trace.
    from nemo_rl.models.generation.torch_backend import TorchGeneration
    from nemo_rl.models.generation.vllm_backend import VllmGeneration
    from nemo_rl.models.policy import PolicyWorker

    for cls in (PolicyWorker, TorchGeneration, VllmGeneration):
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("_") and name != "close":
                assert getattr(member, "__carries_trace__", False), f"{cls.__name__}.{name}"


def test_span_ref_names_a_span_across_processes_as_plain_ints():
    import pickle

    from nemo_rl.distributed import span_ref

    assert span_ref() is None  # no recorded span: nothing to link to
    with capture(spanspec.load(), groups="per_step"):
        attrs = {"rl.iteration": 0, "rl.async.weight_version": 0}
        with spanspec.span("rl.async_grpo.rollout", **attrs) as rollout:
            ref = pickle.loads(pickle.dumps(span_ref()))
    ctx = ref.context()
    assert (ctx.trace_id, ctx.span_id) == (
        rollout.get_span_context().trace_id,
        rollout.get_span_context().span_id,
    )
    assert ctx.is_remote and ctx.trace_flags.sampled
