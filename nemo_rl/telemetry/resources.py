"""What a worker span used on a GPU, and the model FLOPs it did.

**CPU and memory** need no call here: spanspec measures them on every span that declares the
registry's usage conventions (``rl.cpu.seconds``, ``rl.memory.rss_peak_bytes``,
``rl.memory.rss_rise_bytes``: see :mod:`spanspec.usage`).

**CUDA memory.** In a process where torch sees a GPU, :func:`measure_cuda_peaks` adds
:class:`CudaPeaks` to spanspec's meters, so every measured span records
``rl.memory.cuda_peak_allocated_bytes`` and ``rl.memory.cuda_peak_reserved_bytes``:
``torch.cuda.reset_peak_memory_stats()`` at the start, ``max_memory_allocated()`` /
``max_memory_reserved()`` at the end (``nemo_rl.distributed.worker.init_worker`` calls it in
every worker). Measuring never initialises CUDA: until the process has, a span gets no CUDA
attribute. The peaks are one per device, so a span that resets them first keeps those reached
for every other measured span still open, as spanspec does for the RSS. On a CPU nothing is
added: no cost at all.

**FLOPs.** :func:`model_flops` is the usual dense-transformer count (Kaplan et al. 2020, with
PaLM's attention term, Chowdhery et al. 2022, appendix B): per token, a forward pass costs
``2 * N + 4 * L * d * T`` and a training pass (forward plus backward) three times that,
``6 * N + 12 * L * d * T``, where ``N`` is the parameters outside the embedding tables (a lookup
does no multiply), ``L`` the layers, ``d`` the hidden width and ``T`` the padded sequence length
the attention runs over. Padding is not counted as tokens: ``tokens`` are the attended ones.
MFU is achieved FLOP/s over the peak of the device, which is known only from configuration
(``cluster.peak_flops_per_worker``) or :data:`KNOWN_PEAK_FLOPS` (dense bf16 tensor-core peaks by
GPU name); on a CPU without a configured peak it is unknown, not guessed.
"""

from __future__ import annotations

from typing import Any

from spanspec import usage

__all__ = [
    "KNOWN_PEAK_FLOPS",
    "CudaPeaks",
    "flops_shape",
    "measure_cuda_peaks",
    "model_flops",
    "peak_flops",
]

ALLOCATED, RESERVED = "rl.memory.cuda_peak_allocated_bytes", "rl.memory.cuda_peak_reserved_bytes"


class CudaPeaks:
    """A spanspec usage meter (:class:`spanspec.usage.Meter`): the CUDA memory peaks of each
    measured span, from ``cuda`` (``torch.cuda``)."""

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        # the spans measuring now: id(record) -> record [allocated kept, reserved kept]
        self._open: dict[int, list[int]] = {}

    def begin(self) -> list[int] | None:
        cuda = self._cuda
        if not cuda.is_initialized():  # no tensor on the GPU yet: left alone
            return None
        if self._open:  # another span is measuring: keep the peaks it reached before the reset
            allocated, reserved = cuda.max_memory_allocated(), cuda.max_memory_reserved()
            for record in list(self._open.values()):
                record[0], record[1] = max(record[0], allocated), max(record[1], reserved)
        cuda.reset_peak_memory_stats()
        record = [0, 0]
        self._open[id(record)] = record
        return record

    def end(self, record: list[int] | None) -> dict[str, int]:
        if record is None:
            return {}
        self._open.pop(id(record), None)
        cuda = self._cuda
        return {
            ALLOCATED: max(int(cuda.max_memory_allocated()), record[0]),
            RESERVED: max(int(cuda.max_memory_reserved()), record[1]),
        }


_cuda_peaks: CudaPeaks | None = None


def measure_cuda_peaks() -> bool:
    """Adds :class:`CudaPeaks` to this process's usage meters where torch sees a GPU (once);
    returns whether it did. Never initialises CUDA."""
    global _cuda_peaks
    import torch

    if not torch.cuda.is_available():
        return False
    if _cuda_peaks is None:
        _cuda_peaks = CudaPeaks(torch.cuda)
    usage.add_meter(_cuda_peaks)
    return True


# -- FLOPs ------------------------------------------------------------------------------------

KNOWN_PEAK_FLOPS: dict[str, float] = {
    # Dense bf16/fp16 tensor-core peak per GPU (vendor data sheets), matched by substring of
    # torch.cuda.get_device_name(), longest name first.
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "A10G": 125e12,
    "A10": 125e12,
    "L40S": 362e12,
    "L4": 121e12,
    "V100": 125e12,
}


def peak_flops(device_name: str, configured: float | None = None) -> float | None:
    """Returns the peak FLOP/s of one worker: ``configured`` when given, else the known peak of
    the GPU named ``device_name``, else None (a CPU, an unknown GPU: MFU unknown)."""
    if configured:
        return float(configured)
    for name in sorted(KNOWN_PEAK_FLOPS, key=len, reverse=True):
        if name in device_name:
            return KNOWN_PEAK_FLOPS[name]
    return None


def flops_shape(model: Any) -> tuple[int, int, int]:
    """Returns ``(N, L, d)`` of a Hugging Face style model: the parameters outside embedding
    tables, the layers and the hidden width (from ``model.config``; ``(N, 0, 0)`` without one,
    so the attention term drops out)."""
    import torch

    embedded = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    params = sum(p.numel() for p in model.parameters() if id(p) not in embedded)
    config = getattr(model, "config", None) or getattr(
        getattr(model, "trunk", None), "config", None
    )
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return params, layers, hidden


def model_flops(shape: tuple[int, int, int], tokens: int, seq_len: int, *, training: bool) -> int:
    """Returns the model FLOPs of ``tokens`` attended tokens in sequences padded to ``seq_len``:
    ``(6 N + 12 L d T) * tokens`` for a training pass, ``(2 N + 4 L d T) * tokens`` for a
    forward pass (``shape`` is :func:`flops_shape`'s ``(N, L, d)``)."""
    params, layers, hidden = shape
    per_token = 2 * params + 4 * layers * hidden * seq_len
    return int(per_token * tokens * (3 if training else 1))
