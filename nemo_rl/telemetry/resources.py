"""What a worker span used: the memory it peaked at, and the model FLOPs it did.

**Memory.** ``with spanspec.span(...) as span, peak_memory(span):`` records, when the span is
recording, its declared ``rl.memory.*`` attributes at the end:

- ``rl.memory.rss_peak_bytes``: the process's resident-set high-water mark within the span. At the
  span's start ``5`` is written to ``/proc/self/clear_refs`` (Linux resets the mark, ``VmHWM``, to
  the current RSS); at its end the mark is read with ``getrusage(RUSAGE_SELF).ru_maxrss``, which
  Linux takes from the same counter (the larger of it and the peak before ``exec``) in under a
  microsecond, where parsing ``/proc/self/status`` costs several. Where ``clear_refs`` is not
  writable (an old kernel, a locked-down container) the value is the process's peak so far,
  still an upper bound; where there is no ``getrusage`` the attribute is left out.
- ``rl.memory.rss_rise_bytes``: how far that mark rose above the RSS at the span's start (read
  from ``/proc/self/statm``): what the span itself needed (a training micro-batch's saved
  activations, a forward's), apart from what the process already held. Phases compare by it,
  since freed memory the allocator keeps stays in every later span's absolute mark.
- on CUDA (a process that has initialised it), ``rl.memory.cuda_peak_allocated_bytes`` and
  ``rl.memory.cuda_peak_reserved_bytes``: ``torch.cuda.reset_peak_memory_stats()`` at the start,
  ``max_memory_allocated()`` / ``max_memory_reserved()`` at the end. On a CPU they are absent.

A span that is not recording (its group is off) costs one ``is_recording()`` call: the shared
no-op :data:`NO_PEAK` is returned. Spans measured this way must not nest (the high-water mark is
one per process).

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

import os
import sys
from typing import Any

import spanspec

__all__ = [
    "KNOWN_PEAK_FLOPS",
    "NO_PEAK",
    "PeakMemory",
    "current_rss",
    "flops_shape",
    "model_flops",
    "peak_flops",
    "peak_memory",
    "reset_rss_high_water_mark",
    "rss_high_water_mark",
]

_CLEAR_REFS = "/proc/self/clear_refs"
try:
    from resource import RUSAGE_SELF as _SELF
    from resource import getrusage as _getrusage
except ImportError:  # not a Unix
    _getrusage, _SELF = None, 0
_fds: dict[str, int | None] = {}


def _fd(path: str, flags: int) -> int | None:
    """An fd kept open for the life of the process (None when the file cannot be opened)."""
    if path not in _fds:
        try:
            _fds[path] = os.open(path, flags)
        except OSError:
            _fds[path] = None
    return _fds[path]


def reset_rss_high_water_mark() -> bool:
    """Resets ``VmHWM`` to the current RSS; returns False where ``/proc/self/clear_refs`` is not
    writable (the mark then keeps the process's peak so far)."""
    fd = _fd(_CLEAR_REFS, os.O_WRONLY)
    if fd is None:
        return False
    try:
        os.write(fd, b"5")
        return True
    except OSError:
        return False


def rss_high_water_mark() -> int | None:
    """Returns this process's resident-set high-water mark in bytes (``ru_maxrss``, kilobytes on
    Linux), or None where ``getrusage`` is missing."""
    if _getrusage is None:
        return None
    return _getrusage(_SELF).ru_maxrss * 1024


def _cuda() -> Any:
    """``torch.cuda`` when this process has initialised CUDA, else None (never initialises it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss() -> int | None:
    """Returns this process's resident set now, in bytes (None without ``/proc/self/statm``)."""
    fd = _fd("/proc/self/statm", os.O_RDONLY)
    if fd is None:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


class PeakMemory:
    """Resets the high-water marks on entry and annotates the span with them on exit."""

    __slots__ = ("_cuda", "_span", "_start")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._cuda: Any = None
        self._start: int | None = None

    def __enter__(self) -> PeakMemory:
        reset_rss_high_water_mark()
        self._start = current_rss()
        self._cuda = _cuda()
        if self._cuda is not None:
            self._cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc_info: object) -> None:
        attrs: dict[str, int] = {}
        rss = rss_high_water_mark()
        if rss is not None:
            attrs["rl.memory.rss_peak_bytes"] = rss
            if self._start is not None:
                attrs["rl.memory.rss_rise_bytes"] = max(0, rss - self._start)
        if self._cuda is not None:
            attrs["rl.memory.cuda_peak_allocated_bytes"] = int(self._cuda.max_memory_allocated())
            attrs["rl.memory.cuda_peak_reserved_bytes"] = int(self._cuda.max_memory_reserved())
        if attrs:
            spanspec.annotate(self._span, **attrs)


class _NoPeak:
    __slots__ = ()

    def __enter__(self) -> _NoPeak:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


NO_PEAK = _NoPeak()
"""What :func:`peak_memory` returns for a span that is not recording: does nothing."""


def peak_memory(span: Any) -> PeakMemory | _NoPeak:
    """Returns a context manager that records the memory ``span`` peaks at (see the module
    docstring); :data:`NO_PEAK` when the span is not recording."""
    return PeakMemory(span) if span.is_recording() else NO_PEAK


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
