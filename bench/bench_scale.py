"""Many workers on a real multi-node Ray cluster, exporting through a real collector.

    python bench/bench_scale.py                      # 64 workers, 8 nodes, 12 cases: 4-8 min here
    python bench/bench_scale.py --workers 128 --nodes 16 --steps 3
    python bench/bench_scale.py --strategies all_ranks --presets per_step --json out.json

What runs:

- A Ray cluster of ``--nodes`` raylets on this machine (``ray.cluster_utils.Cluster``), each
  declaring its share of the GPUs, so placement, node ids and per-node resources are Ray's own,
  as on a real cluster (the GPUs are a logical resource: nothing here touches a device).
- ``--workers`` ranks of one ``WorkerGroup`` (the class every role of a run uses: one placement
  group, a bundle of ``num_cpus=0, num_gpus=1`` per rank, each rank told its rank, local rank and
  node), one per simulated GPU, that sleep through a GRPO step shaped like a real one (generation about half of it) and emit the registry's worker
  spans: ``rl.worker.generate``, ``rl.worker.logprob`` (policy and reference),
  ``rl.worker.train_microbatch`` x ``--micro-batches``, ``rl.worker.optimizer_step`` and
  ``rl.worker.update_weights``. Weight sync is a tree, as a broadcast is: the driver asks the first
  worker of each node, which passes the same trace context on to the other workers of its node.
- The driver (this process) runs ``rl.grpo.step`` and its phases, and asks the ranks through the
  group (``run_all``, and ``call``/``gather`` for the weight-sync tree), as a loop does; the
  actors take the trace context with ``@carries_trace``.
- rotel (the collector) receives OTLP/gRPC from every exporting process and forwards it to an
  OTLP receiver in a child process, which keeps the spans for the table.

For each export strategy x group preset, telemetry starts afresh on the driver
(``init_telemetry_driver``) and on every rank (``init_worker`` with the rank's ``RankInfo``, as a
group's rank starts), runs ``--steps`` steps, and stops (``close_worker`` /
``shutdown_telemetry``). The worker processes are reused across cases (starting 64 of them takes
minutes on 2 cores); their telemetry is not.

Columns: ``ranks`` exporting workers; ``step s`` the driver's step time; ``spans/step`` spans
received per step (the driver's included); ``spans/s`` received per second of the step loop;
``B/span`` OTLP bytes per span at the receiver; ``col µs/span`` the collector's CPU time per span
(its idle ticks included, so shown from 500 spans); ``dropped`` spans the pipelines counted as
dropped, failed or unresolved (driver + workers); ``lost@col`` spans exported but never delivered
by the collector; ``RSS`` driver and largest worker resident memory, MiB (``+`` the largest growth
of a worker during the case); ``CPU/step`` worker CPU ms per step, exporting vs other ranks;
``flush s`` driver and slowest worker shutdown; ``orphans`` received spans whose parent never
arrived; ``traces`` distinct trace ids received.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import spanspec  # noqa: E402
from nemo_rl.distributed import (  # noqa: E402
    RankInfo,
    WorkerGroup,
    call,
    carries_trace,
    close_worker,
    init_ray,
    init_worker,
    telemetry_env_vars,
)
from nemo_rl.distributed.ray_cluster import telemetry_env_prefixes  # noqa: E402
from nemo_rl.telemetry import (  # noqa: E402
    RunIdentity,
    TelemetryConfig,
    get_telemetry,
    init_telemetry_driver,
    shutdown_telemetry,
)
from tests.collector import Agent, rotel_agent  # noqa: E402

STRATEGIES = ("all_ranks", "first_rank_per_node", "sampled", "single_rank")
PRESETS = ("default", "per_step", "all")

# Share of a step each phase takes (generation dominates GRPO); the worker phases sleep this long.
SHAPE = {
    "data_processing": 0.02,
    "generation": 0.45,
    "reward": 0.03,
    "logprob": 0.10,
    "reference_policy": 0.08,
    "advantage": 0.01,
    "policy_update": 0.25,
    "weight_sync": 0.06,
}


def _sleep(seconds: float) -> None:
    time.sleep(seconds * random.uniform(0.9, 1.1))  # ranks never finish in lockstep


def _cpu_s(pid: int) -> float:
    """Returns the CPU time (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _import_sdk() -> None:
    """Imports the SDK and OTLP exporter up front, so the first case pays no import in its figures."""
    import opentelemetry.exporter.otlp.proto.grpc.trace_exporter
    import opentelemetry.sdk.trace  # noqa: F401


# -- the worker -----------------------------------------------------------------------------------


class SimWorker:
    """One simulated GPU rank: sleeps through each phase inside the registry's worker span."""

    def __init__(self, step_s: float, micro_batches: int, info: RankInfo) -> None:
        self.info = info
        rank, world_size = info.rank, info.world_size
        self.rank, self.world_size = rank, world_size
        self.step_s, self.micro_batches = step_s, micro_batches
        self._rss0 = self._cpu0 = 0.0
        _import_sdk()

    @carries_trace
    def begin(self, env: dict[str, str]) -> bool:
        """Starts this rank's telemetry from ``env`` (the driver's); returns whether it exports."""
        prefixes = telemetry_env_prefixes()
        for key in [k for k in os.environ if k.startswith(prefixes)]:
            del os.environ[key]
        os.environ.update(env)
        self._rss0 = _rss_mib()
        init_worker(self.info)  # its rank, world size, local rank and node, as the group told it
        self._cpu0 = time.process_time()  # the steps and the flush, not the set-up
        handle = get_telemetry()
        return bool(handle and handle.is_exporting)

    @carries_trace
    def generate(self, batch_size: int) -> int:
        """Sleeps through generation; returns the tokens it 'generated'."""
        with spanspec.span(
            "rl.worker.generate",
            **{
                "gen_ai.system": "vllm",
                "gen_ai.operation.name": "text_completion",
                "gen_ai.usage.input_tokens": 64 * batch_size,
                "gen_ai.usage.output_tokens": 256 * batch_size,
                "rl.worker.rank": self.rank,
            },
        ):
            _sleep(SHAPE["generation"] * self.step_s)
        return 256 * batch_size

    @carries_trace
    def logprob(self, batch_size: int, group: str) -> None:
        """Sleeps through a log-prob pass of the ``policy`` or ``reference`` model."""
        with spanspec.span(
            "rl.worker.logprob",
            **{"rl.batch_size": batch_size, "rl.worker.group": group, "rl.worker.rank": self.rank},
        ):
            key = "logprob" if group == "policy" else "reference_policy"
            _sleep(SHAPE[key] * self.step_s)

    @carries_trace
    def train(self, batch_size: int) -> None:
        """Sleeps through the micro-batches and one optimiser step."""
        share = SHAPE["policy_update"] * self.step_s / (self.micro_batches + 0.5)
        for micro in range(self.micro_batches):
            with spanspec.span(
                "rl.worker.train_microbatch",
                **{
                    "rl.micro_batch": micro,
                    "rl.batch_size": batch_size // self.micro_batches,
                    "rl.worker.rank": self.rank,
                },
            ):
                _sleep(share)
        with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": self.rank}):
            _sleep(share / 2)

    @carries_trace
    def update_weights(self, num_bytes: int, peers: list[Any] | None = None) -> None:
        """Loads new weights; a node's first rank passes them (and the trace) on to ``peers``."""
        with spanspec.span(
            "rl.worker.update_weights",
            **{"rl.weight_sync.num_bytes": num_bytes, "rl.worker.rank": self.rank},
        ):
            _sleep(SHAPE["weight_sync"] * self.step_s / 2)
            if peers:
                ray.get([call(p.update_weights, num_bytes) for p in peers])

    @carries_trace
    def end(self) -> dict[str, Any]:
        """Flushes and stops this rank's telemetry; returns its counters, memory and CPU time."""
        handle = get_telemetry()
        close_worker()
        stats = handle.shutdown() if handle is not None else None  # the first call's stats again
        return {
            "rank": self.rank,
            "exporting": bool(handle and handle.is_exporting),
            "exported": stats.spans_exported if stats else 0,
            "lost": stats.spans_lost if stats else 0,
            "flush_s": (stats.shutdown_s or 0.0) if stats else 0.0,
            "rss_mib": _rss_mib(),
            "rss_growth_mib": _rss_mib() - self._rss0,
            "cpu_s": time.process_time() - self._cpu0,
        }


# -- the receiver, in its own process so it shares no GIL or memory with the driver -------------


def _receiver_main(conn: Any) -> None:
    from tests.otlp_receiver import OtlpReceiver

    with OtlpReceiver(http_enabled=False) as rx:
        conn.send(rx.grpc_endpoint)
        seen = 0
        while (msg := conn.recv()) is not None:
            run_id, expected, timeout = msg

            def of_run(run_id: str = run_id) -> list[Any]:
                return [s for s in rx.spans() if s.resource.get("rl.run_id") == run_id]

            rx.wait_until(lambda n=expected: len(of_run()) >= n, timeout)
            time.sleep(0.3)  # anything still in flight beyond what the counters said
            requests = rx.of("traces")[seen:]
            seen += len(requests)
            wire = sum(r.ByteSize() for _, r in requests)
            spans = [
                (s.name, s.trace_id, s.span_id, s.parent_span_id, s.resource.get("rl.worker.rank"))
                for s in of_run()
            ]
            count = sum(
                len(ss.spans)
                for _, r in requests
                for rs in r.resource_spans
                for ss in rs.scope_spans
            )
            conn.send((spans, wire, count))


class Receiver:
    """The OTLP receiver behind the collector, in a child process; ``spans(run_id)`` asks it."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")  # before Ray or gRPC start any thread
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_receiver_main, args=(child,), daemon=True)
        self._proc.start()
        self.grpc_endpoint: str = self._conn.recv()

    def spans(self, run_id: str, expected: int, timeout: float = 15.0) -> tuple[list, int, int]:
        """Waits for ``expected`` spans of ``run_id``; returns them, and the wire bytes and span
        count of every request since the last call."""
        self._conn.send((run_id, expected, timeout))
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join(10)


# -- one case -------------------------------------------------------------------------------------


@dataclass
class Case:
    """What one strategy x preset measured."""

    strategy: str
    preset: str
    workers: int
    nodes: int
    steps: int
    exporting_ranks: list[int] = field(default_factory=list)
    ranks_received: list[int] = field(default_factory=list)
    rank_nodes: dict[int, str] = field(default_factory=dict)
    spans: int = 0
    spans_exported: int = 0
    spans_per_step: float = 0.0
    spans_per_s: float = 0.0
    bytes_per_span: float = 0.0
    dropped: int = 0
    driver_rss_mib: float = 0.0
    worker_rss_mib: float = 0.0
    worker_rss_growth_mib: float = 0.0
    cpu_ms_per_step_exporting: float | None = None
    cpu_ms_per_step_other: float | None = None
    collector_us_per_span: float = 0.0
    driver_flush_s: float = 0.0
    worker_flush_s: float = 0.0
    orphans: int = 0
    traces: int = 0
    step_s: float = 0.0


def _driver_step(step: int, group: WorkerGroup, leaders: dict[int, list[Any]], args: Any) -> None:
    it = {"rl.iteration": step}
    batch = 8
    with spanspec.span("rl.grpo.step", **it, **{"rl.algorithm": "grpo"}):
        with spanspec.span("rl.grpo.data_processing", **it, **{"rl.batch_size": batch}):
            _sleep(SHAPE["data_processing"] * args.step_s)
        with spanspec.span("rl.grpo.rollout", **it):
            with spanspec.span("rl.grpo.generation", **it, **{"rl.batch_size": batch}):
                group.run_all("generate", batch)
            with spanspec.span("rl.grpo.reward", **it):
                _sleep(SHAPE["reward"] * args.step_s)
        with spanspec.span("rl.grpo.logprob", **it, **{"rl.batch_size": batch}):
            group.run_all("logprob", batch, "policy")
        with spanspec.span("rl.grpo.reference_policy", **it, **{"rl.batch_size": batch}):
            group.run_all("logprob", batch, "reference")
        with spanspec.span("rl.grpo.advantage", **it):
            _sleep(SHAPE["advantage"] * args.step_s)
        with spanspec.span(
            "rl.grpo.policy_update", **it, **{"rl.num_micro_batches": args.micro_batches}
        ):
            group.run_all("train", batch)
        with spanspec.span("rl.grpo.weight_sync", **it, **{"rl.weight_sync.num_bytes": 1 << 30}):
            refs = [group.call(r, "update_weights", 1 << 30, peers) for r, peers in leaders.items()]
            group.gather(refs, "update_weights")


def run_case(
    strategy: str,
    preset: str,
    group: WorkerGroup,
    collector: Agent,
    receiver: Receiver,
    args: Any,
) -> Case:
    """Runs ``args.steps`` steps with fresh telemetry under ``strategy`` and ``preset``."""
    prefixes = telemetry_env_prefixes()
    for key in [k for k in os.environ if k.startswith(prefixes)]:
        del os.environ[key]
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.grpc_endpoint
    os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    run_id = f"scale-{strategy}-{preset}-{secrets.token_hex(3)}"
    config = TelemetryConfig(
        exporter="otlp",
        span_groups=preset,
        export_strategy=strategy,
        export_sample_rate=args.sample_rate,
        metrics_enabled=False,
        run_id=run_id,
        shutdown_timeout_s=30.0,
    )
    identity = RunIdentity("grpo", run_dir=tempfile.mkdtemp(prefix="bench_scale_"))
    node_of = [info.node for info in group.infos]
    case = Case(strategy, preset, group.size, len(set(node_of)), args.steps)
    case.rank_nodes = dict(enumerate(node_of))
    collector_cpu = _cpu_s(collector.process.pid)
    init_telemetry_driver(config, identity)
    env = telemetry_env_vars()
    # Weight sync as a tree: the first rank of each node passes the weights on to the others.
    leaders: dict[int, list[Any]] = {}
    for node in dict.fromkeys(node_of):
        ranks = [r for r in range(group.size) if node_of[r] == node]
        leaders[ranks[0]] = [group.actors[r] for r in ranks[1:]]

    with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "rl.run_id": run_id}):
        with spanspec.span("rl.grpo.model_init"):
            exporting = group.run_all("begin", env)
        case.exporting_ranks = [r for r, e in enumerate(exporting) if e]
        started = time.perf_counter()
        for step in range(1, args.steps + 1):  # numbered from 1, as every loop's rl.iteration
            _driver_step(step, group, leaders, args)
        case.step_s = (time.perf_counter() - started) / args.steps
    loop_s = case.step_s * args.steps

    ends = group.run_all("end")
    case.driver_rss_mib = _rss_mib()
    driver = shutdown_telemetry()
    assert driver is not None
    case.driver_flush_s = driver.shutdown_s or 0.0
    case.spans_exported = driver.spans_exported + sum(e["exported"] for e in ends)
    case.dropped = driver.spans_lost + sum(e["lost"] for e in ends)
    case.worker_rss_mib = max(e["rss_mib"] for e in ends)
    case.worker_rss_growth_mib = max(e["rss_growth_mib"] for e in ends)
    case.worker_flush_s = max(e["flush_s"] for e in ends)
    for label, pick in (("exporting", True), ("other", False)):
        cpu = [e["cpu_s"] for e in ends if e["exporting"] is pick]
        if cpu:
            setattr(case, f"cpu_ms_per_step_{label}", statistics.mean(cpu) / args.steps * 1e3)

    spans, wire, wire_spans = receiver.spans(run_id, case.spans_exported)
    if spans:
        collector_s = _cpu_s(collector.process.pid) - collector_cpu
        case.collector_us_per_span = collector_s / len(spans) * 1e6
    ids = {s[2] for s in spans}
    case.spans = len(spans)
    case.spans_per_step = len(spans) / args.steps
    case.spans_per_s = len(spans) / loop_s
    case.bytes_per_span = wire / wire_spans if wire_spans else 0.0
    case.orphans = sum(1 for s in spans if s[3] and s[3] not in ids)
    case.traces = len({s[1] for s in spans})
    case.ranks_received = sorted({s[4] for s in spans if s[0].startswith("rl.worker.")})
    return case


# -- the cluster ----------------------------------------------------------------------------------


def start_cluster(gpus_per_node: list[int]) -> Cluster:
    """Starts one raylet on 127.0.0.1 per entry (the first one the head), with that many GPUs.

    The cluster lives under a temporary folder of its own (``$RAY_TMPDIR``, inherited by every
    Ray process): ``Cluster`` records its address in ``<ray temp dir>/ray_current_cluster``, and a
    plain ``ray.init()`` anywhere else on the machine would join it.
    """
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray_scale_", dir="/tmp")
    common = {"num_cpus": 0, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **common,
            "num_cpus": 1,
            "num_gpus": gpus_per_node[0],
            "include_dashboard": False,
        },
    )
    for gpus in gpus_per_node[1:]:
        cluster.add_node(**common, num_gpus=gpus)
    cluster.wait_for_nodes()
    return cluster


def _header() -> str:
    head = (
        f"{'strategy':20} {'preset':8} {'ranks':>5} {'step s':>6} {'spans/step':>10} "
        f"{'spans/s':>8} {'B/span':>6} {'col µs/span':>11} {'dropped':>7} {'lost@col':>8} "
        f"{'RSS drv/wkr MiB':>16} {'CPU/step ms exp/oth':>19} {'flush s drv/wkr':>15} "
        f"{'orphans':>7} {'traces':>6}"
    )
    return head + "\n" + "-" * len(head)


def _row(c: Case) -> str:
    cpu = "/".join(
        "-" if v is None else f"{v:.0f}"
        for v in (c.cpu_ms_per_step_exporting, c.cpu_ms_per_step_other)
    )
    rss = f"{c.driver_rss_mib:.0f}/{c.worker_rss_mib:.0f}+{c.worker_rss_growth_mib:.0f}"
    flush = f"{c.driver_flush_s:.2f}/{c.worker_flush_s:.2f}"
    # Below a few hundred spans the collector's idle ticks, not the spans, make its CPU time.
    collector = f"{c.collector_us_per_span:.0f}" if c.spans >= 500 else "-"
    return (
        f"{c.strategy:20} {c.preset:8} {len(c.exporting_ranks):5d} {c.step_s:6.2f} "
        f"{c.spans_per_step:10.1f} {c.spans_per_s:8.0f} {c.bytes_per_span:6.0f} "
        f"{collector:>11} {c.dropped:7d} "
        f"{c.spans_exported - c.spans:8d} {rss:>16} {cpu:>19} "
        f"{flush:>15} {c.orphans:7d} {c.traces:6d}"
    )


def _words(text: str, valid: tuple[str, ...], flag: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in valid]
    if bad or not words:
        raise SystemExit(
            f"{flag}: unknown {bad or text!r}; expected a comma list of {', '.join(valid)}"
        )
    return words


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=64, help="worker actors (simulated GPUs)")
    parser.add_argument("--nodes", type=int, default=8, help="Ray nodes (raylets) on this machine")
    parser.add_argument("--steps", type=int, default=4, help="training steps per case")
    parser.add_argument(
        "--step-s", type=float, default=1.0, help="seconds one simulated step takes"
    )
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches per train call")
    parser.add_argument("--sample-rate", type=float, default=0.1, help="share of ranks, sampled")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma list")
    parser.add_argument("--presets", default=",".join(PRESETS), help="comma list of group presets")
    parser.add_argument("--json", type=Path, help="also write every case's figures here")
    args = parser.parse_args(argv)
    strategies = _words(args.strategies, STRATEGIES, "--strategies")
    presets = _words(args.presets, PRESETS, "--presets")
    if args.nodes < 1 or args.workers < args.nodes:
        raise SystemExit(
            f"--workers {args.workers} --nodes {args.nodes}: expected at least one worker per "
            "node (and one node)"
        )
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nemo_rl.telemetry").setLevel(logging.ERROR)  # "init after Ray started"

    began = time.perf_counter()
    _import_sdk()
    receiver = Receiver()
    per_node, extra = divmod(args.workers, args.nodes)
    cluster = start_cluster([per_node + (i < extra) for i in range(args.nodes)])
    cases: list[Case] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_scale_rotel_") as work:
            with rotel_agent(receiver.grpc_endpoint, "grpc", Path(work)) as agent:
                init_ray(address=cluster.address)
                group = WorkerGroup(
                    SimWorker,
                    args.step_s,
                    args.micro_batches,
                    name="policy",
                    num_workers=args.workers,
                    num_cpus=0,
                    num_gpus=1,
                )
                node_of = [info.node for info in group.infos]
                print(
                    f"{args.workers} workers on {len(set(node_of))} Ray nodes, "
                    f"ready in {time.perf_counter() - began:.0f} s; {args.steps} steps of "
                    f"{args.step_s} s per case\n",
                    flush=True,
                )
                print(_header(), flush=True)
                for strategy in strategies:
                    for preset in presets:
                        case = run_case(strategy, preset, group, agent, receiver, args)
                        cases.append(case)
                        print(_row(case), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        receiver.close()
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
    print(f"\ndone in {time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cases], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
