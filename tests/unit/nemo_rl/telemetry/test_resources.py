"""CPU time, memory peaks and model FLOPs of a worker span (nemo_rl.telemetry.resources).

This machine has no GPU: the CUDA attributes (``rl.memory.cuda_peak_*``) are checked to be absent
here; on a GPU they come from torch.cuda's peak statistics, guarded the same way."""

from __future__ import annotations

import os
import time

import pytest
import torch

import spanspec
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm
from nemo_rl.telemetry.resources import (
    NO_RESOURCES,
    flops_shape,
    model_flops,
    peak_flops,
    process_cpu_seconds,
    rss_high_water_mark,
    span_resources,
)

MiB = 2**20


def _rss() -> int:
    with open("/proc/self/status", "rb") as f:
        text = f.read()
    at = text.index(b"VmRSS:")
    return int(text[at + 6 : text.index(b"kB", at)]) * 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_a_block_allocated_inside_a_span_is_in_its_peak(spans):
    before = _rss()
    with (
        spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
        span_resources(span),
    ):
        block = bytearray(b"\x01") * (64 * MiB)  # written, so resident
        del block
    (recorded,) = spans.all()
    peak = recorded.attributes["rl.memory.rss_peak_bytes"]
    # The kernel counts RSS in per-thread batches (up to 64 pages each): a MiB of slack.
    assert peak - before >= 63 * MiB, (peak, before)
    assert recorded.attributes["rl.memory.rss_rise_bytes"] >= 63 * MiB
    assert "rl.memory.cuda_peak_allocated_bytes" not in recorded.attributes  # no GPU here
    # the mark was reset at the span's start: a second span without the block peaks lower
    with (
        spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
        span_resources(span),
    ):
        pass
    assert spans.all()[-1].attributes["rl.memory.rss_peak_bytes"] < peak - 32 * MiB
    assert rss_high_water_mark() >= _rss() - MiB  # the same counters, read a moment apart


def _measured(spans, work) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a worker span around ``work()``."""
    with (
        spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
        span_resources(span),
    ):
        work()
    recorded = spans.all()[-1]
    return recorded.attributes["rl.cpu.seconds"], (recorded.end_time - recorded.start_time) / 1e9


@pytest.mark.skipif(process_cpu_seconds() is None, reason="needs getrusage")
def test_busy_work_takes_cpu_as_long_as_it_lasts_and_a_sleep_takes_none(spans):
    clocks = {}

    def spin() -> None:  # 0.25 s of this thread's CPU, however long the machine takes to give it
        thread, process = time.thread_time(), time.process_time()
        while time.thread_time() - thread < 0.25:
            pass
        clocks["thread"], clocks["process"] = (
            time.thread_time() - thread,
            time.process_time() - process,
        )

    cpu, wall = _measured(spans, spin)
    # the span's figure is the process's CPU: at least the spinning thread's, at most what every
    # thread used around it (plus getrusage's microsecond steps)
    assert clocks["thread"] - 0.002 <= cpu <= clocks["process"] + 0.01, (cpu, clocks)
    # ~1.0 on a free core; below when the machine runs other work too (what the figure is for)
    assert cpu / wall > 0.5 or os.getloadavg()[0] > (os.cpu_count() or 1), (cpu, wall)
    cpu, wall = _measured(spans, lambda: time.sleep(0.3))
    assert wall >= 0.3 and cpu < 0.03, (cpu, wall)  # waiting uses no CPU


@pytest.mark.spanspec(groups="job")
def test_a_span_that_is_off_costs_no_measurement(spans):
    with spanspec.span("rl.worker.optimizer_step") as span:
        assert span_resources(span) is NO_RESOURCES
    assert len(spans) == 0


def test_flops_match_a_hand_count_of_the_tiny_model():
    vocab = 20
    model = build_causal_lm(ModelConfig(), vocab, seed=0)
    params, layers, hidden = flops_shape(model)
    d, ff, n = 128, 384, 4
    per_layer = 4 * d * d + 3 * d * ff + 2 * d  # q k v o, gate up down, two RMSNorms
    assert (layers, hidden) == (n, d)
    assert params == n * per_layer + d + vocab * d  # + final norm + lm head; embedding left out
    tokens, seq = 100, 32
    assert model_flops((params, layers, hidden), tokens, seq, training=True) == tokens * (
        6 * params + 12 * n * d * seq
    )
    assert model_flops((params, layers, hidden), tokens, seq, training=False) == tokens * (
        2 * params + 4 * n * d * seq
    )


def test_the_peak_is_configured_or_a_known_gpu_else_unknown():
    assert peak_flops("cpu") is None  # MFU unknown on a CPU, not invented
    assert peak_flops("cpu", 1e12) == 1e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("Some Future GPU") is None
    assert torch.cuda.is_available() is False or peak_flops(torch.cuda.get_device_name()) > 0


class _StandInCuda:
    """torch.cuda's peak-memory calls on a GPU, stood in for: this machine has no GPU, so the
    CUDA path of ``span_resources`` runs here against these (a mock of what cannot run here;
    ``test_cuda_peaks_on_a_real_gpu`` below runs the same path on a real one)."""

    def __init__(self, initialized: bool) -> None:
        self.initialized, self.resets = initialized, 0
        self.allocated, self.reserved = 3 * MiB, 8 * MiB

    def install(self, monkeypatch) -> None:
        from nemo_rl.telemetry import resources

        monkeypatch.setattr(resources, "_no_cuda", False)  # as in a process that has a GPU
        for name in ("is_available", "is_initialized", "reset_peak_memory_stats"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: self.reserved)

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def reset_peak_memory_stats(self) -> None:
        self.resets += 1
        self.allocated = self.reserved = 0  # what a reset does: the peaks start again from here


def test_a_cuda_process_records_the_peaks_reset_at_each_span_start(spans, monkeypatch):
    cuda = _StandInCuda(initialized=True)
    cuda.install(monkeypatch)
    for allocated in (5 * MiB, 2 * MiB):
        with (
            spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
            span_resources(span),
        ):
            cuda.allocated, cuda.reserved = allocated, 2 * allocated  # the work's own peak
    assert cuda.resets == 2
    peaks = [
        (
            s.attributes["rl.memory.cuda_peak_allocated_bytes"],
            s.attributes["rl.memory.cuda_peak_reserved_bytes"],
        )
        for s in spans.all()
    ]
    assert peaks == [(5 * MiB, 10 * MiB), (2 * MiB, 4 * MiB)]  # the second is not the first's
    assert all(s.attributes["rl.memory.rss_peak_bytes"] > 0 for s in spans.all())  # and the RSS


def test_cuda_that_the_process_has_not_initialised_is_left_alone(spans, monkeypatch):
    cuda = _StandInCuda(initialized=False)  # torch imported, no tensor on the GPU yet
    cuda.install(monkeypatch)
    with (
        spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
        span_resources(span),
    ):
        pass
    assert cuda.resets == 0  # measuring never initialises CUDA (that takes seconds and memory)
    (recorded,) = spans.all()
    assert "rl.memory.cuda_peak_allocated_bytes" not in recorded.attributes
    assert recorded.attributes["rl.memory.rss_peak_bytes"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (none on this machine)")
def test_cuda_peaks_on_a_real_gpu(spans):
    torch.zeros(1, device="cuda")  # initialise CUDA
    with (
        spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}) as span,
        span_resources(span),
    ):
        block = torch.ones(64 * MiB // 4, device="cuda")  # 64 MiB of float32
        del block
    (recorded,) = spans.all()
    assert recorded.attributes["rl.memory.cuda_peak_allocated_bytes"] >= 64 * MiB
    assert recorded.attributes["rl.memory.cuda_peak_reserved_bytes"] >= 64 * MiB
