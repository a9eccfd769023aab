"""What a worker span used (CPU time, memory peaks) and the model FLOPs it did
(nemo_rl.telemetry.resources; the CPU and RSS measuring itself is spanspec's, tested in
tests/unit/spanspec/test_usage.py).

This machine has no GPU: the CUDA attributes (``rl.memory.cuda_peak_*``) are checked against a
stand-in of torch.cuda's peak statistics, and to be absent without CUDA; the real-GPU test below
is skipped here."""

from __future__ import annotations

import pytest
import torch

import spanspec
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm
from nemo_rl.telemetry import resources
from nemo_rl.telemetry.resources import (
    flops_shape,
    measure_cuda_peaks,
    model_flops,
    peak_flops,
)
from spanspec import usage

MiB = 2**20


@pytest.mark.skipif(not usage.MEASURABLE, reason="needs getrusage")
def test_every_worker_span_gets_its_cpu_time_and_memory_with_no_call_at_the_site(spans):
    # the registry's usage conventions name nemo_rl's attributes: spanspec measures every span
    # that declares them
    for name in ("rl.worker.optimizer_step", "rl.worker.allreduce", "rl.worker.generate"):
        with spanspec.span(name):
            bytearray(b"\x01") * (64 * MiB)  # mmapped (over glibc's 32 MiB cap): fresh pages
    for recorded in spans.all():
        attributes = recorded.attributes
        assert attributes["rl.cpu.seconds"] >= 0.0, recorded.name
        assert attributes["rl.memory.rss_peak_bytes"] > 0, recorded.name
        assert attributes["rl.memory.rss_rise_bytes"] >= 63 * MiB, recorded.name
        assert "rl.memory.cuda_peak_allocated_bytes" not in attributes  # no GPU here


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only machine's case")
def test_a_cpu_process_adds_no_cuda_meter():
    assert measure_cuda_peaks() is False
    assert usage._meters == ()  # nothing runs per span for CUDA on a CPU


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
    CUDA meter runs here against these (a mock of what cannot run here;
    ``test_cuda_peaks_on_a_real_gpu`` below runs the same path on a real one)."""

    def __init__(self, initialized: bool) -> None:
        self.initialized, self.resets = initialized, 0
        self.allocated, self.reserved = 3 * MiB, 8 * MiB

    def install(self, monkeypatch) -> None:
        for name in ("is_available", "is_initialized", "reset_peak_memory_stats"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: self.reserved)
        monkeypatch.setattr(resources, "_cuda_peaks", None)
        assert measure_cuda_peaks() is True  # as a worker on a GPU does at its start

    def use(self, allocated: int) -> None:
        """The work's own peaks (reserved: twice what is allocated)."""
        self.allocated = max(self.allocated, allocated)
        self.reserved = max(self.reserved, 2 * allocated)

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def reset_peak_memory_stats(self) -> None:
        self.resets += 1
        self.allocated = self.reserved = 0  # what a reset does: the peaks start again from here


@pytest.fixture
def no_meters():
    yield
    for meter in usage._meters:
        usage.remove_meter(meter)


def _peaks(recorded) -> tuple[int, int]:
    return (
        recorded.attributes["rl.memory.cuda_peak_allocated_bytes"],
        recorded.attributes["rl.memory.cuda_peak_reserved_bytes"],
    )


def test_a_cuda_process_records_the_peaks_reset_at_each_span_start(spans, monkeypatch, no_meters):
    cuda = _StandInCuda(initialized=True)
    cuda.install(monkeypatch)
    for allocated in (5 * MiB, 2 * MiB):
        with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}):
            cuda.use(allocated)
    assert cuda.resets == 2
    peaks = [_peaks(s) for s in spans.all()]
    assert peaks == [(5 * MiB, 10 * MiB), (2 * MiB, 4 * MiB)]  # the second is not the first's
    assert all(s.attributes["rl.memory.rss_peak_bytes"] > 0 for s in spans.all())  # and the RSS


def test_an_outer_span_keeps_its_cuda_peak_across_an_inner_one(spans, monkeypatch, no_meters):
    cuda = _StandInCuda(initialized=True)
    cuda.install(monkeypatch)
    with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}):
        cuda.use(5 * MiB)
        with spanspec.span("rl.worker.allreduce", **{"rl.worker.rank": 0}):
            cuda.use(1 * MiB)  # the inner span's reset must not take the outer one's 5 MiB
        cuda.use(2 * MiB)
    inner, outer = spans.all()
    assert _peaks(inner) == (1 * MiB, 2 * MiB)
    assert _peaks(outer) == (5 * MiB, 10 * MiB)


def test_cuda_that_the_process_has_not_initialised_is_left_alone(spans, monkeypatch, no_meters):
    cuda = _StandInCuda(initialized=False)  # torch imported, no tensor on the GPU yet
    cuda.install(monkeypatch)
    with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}):
        pass
    assert cuda.resets == 0  # measuring never initialises CUDA (that takes seconds and memory)
    (recorded,) = spans.all()
    assert "rl.memory.cuda_peak_allocated_bytes" not in recorded.attributes
    assert recorded.attributes["rl.memory.rss_peak_bytes"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (none on this machine)")
def test_cuda_peaks_on_a_real_gpu(spans, no_meters):
    torch.zeros(1, device="cuda")  # initialise CUDA
    assert measure_cuda_peaks() is True
    with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": 0}):
        block = torch.ones(64 * MiB // 4, device="cuda")  # 64 MiB of float32
        del block
    (recorded,) = spans.all()
    assert recorded.attributes["rl.memory.cuda_peak_allocated_bytes"] >= 64 * MiB
    assert recorded.attributes["rl.memory.cuda_peak_reserved_bytes"] >= 64 * MiB
