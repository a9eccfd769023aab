"""What a worker span used on a GPU, and the model FLOPs it did.

**CPU and memory** need no call here: spanspec measures them on every span that declares the
registry's usage conventions (``rl.cpu.seconds``, ``rl.memory.rss_peak_bytes``,
``rl.memory.rss_rise_bytes``: see :mod:`spanspec.usage`).

**CUDA memory.** ``with spanspec.span(...) as span, cuda_peaks(span):`` records, in a process that
has initialised CUDA and when the span is recording, ``rl.memory.cuda_peak_allocated_bytes`` and
``rl.memory.cuda_peak_reserved_bytes``: ``torch.cuda.reset_peak_memory_stats()`` at the start,
``max_memory_allocated()`` / ``max_memory_reserved()`` at the end. Measuring never initialises
CUDA; on a CPU (and for a span that is not recording) the shared no-op :data:`NO_PEAKS` is
returned, after one cached check. Spans measured this way must not nest (the peaks are one per
device).

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

import sys
from typing import Any

from opentelemetry.trace import INVALID_SPAN

import spanspec

__all__ = [
    "KNOWN_PEAK_FLOPS",
    "NO_PEAKS",
    "CudaPeaks",
    "cuda_peaks",
    "flops_shape",
    "model_flops",
    "peak_flops",
]

_no_cuda = False  # torch is loaded and sees no CUDA device: it never will in this process


def _cuda() -> Any:
    """``torch.cuda`` when this process has initialised CUDA, else None (never initialises it)."""
    global _no_cuda
    torch = None if _no_cuda else sys.modules.get("torch")
    if torch is None:
        return None
    if not torch.cuda.is_available():
        _no_cuda = True
        return None
    return torch.cuda if torch.cuda.is_initialized() else None


class CudaPeaks:
    """Resets the device's peak-memory counters on entry; annotates the span with the peaks
    allocated and reserved on exit."""

    __slots__ = ("_cuda", "_span")

    def __init__(self, span: Any, cuda: Any) -> None:
        self._span, self._cuda = span, cuda

    def __enter__(self) -> CudaPeaks:
        self._cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        cuda = self._cuda
        spanspec.annotate(
            self._span,
            **{
                "rl.memory.cuda_peak_allocated_bytes": int(cuda.max_memory_allocated()),
                "rl.memory.cuda_peak_reserved_bytes": int(cuda.max_memory_reserved()),
            },
        )


class _NoPeaks:
    __slots__ = ()

    def __enter__(self) -> _NoPeaks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


NO_PEAKS = _NoPeaks()
"""What :func:`cuda_peaks` returns without CUDA or for a span that is not recording: does
nothing."""


def cuda_peaks(span: Any) -> CudaPeaks | _NoPeaks:
    """Returns a context manager that records the CUDA memory peaks of ``span`` (see the module
    docstring); :data:`NO_PEAKS` without CUDA or when the span is not recording."""
    if _no_cuda:  # a CPU process, once seen: the common case here, first
        return NO_PEAKS
    cuda = _cuda()
    if cuda is None or span is INVALID_SPAN or not span.is_recording():
        return NO_PEAKS  # INVALID_SPAN: a disabled site's span
    return CudaPeaks(span, cuda)


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
