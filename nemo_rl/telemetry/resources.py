"""What a worker span used: the CPU time and memory it took, and the model FLOPs it did.

**CPU and memory.** ``with spanspec.span(...) as span, span_resources(span):`` records, when the
span is recording, its declared ``rl.cpu.*`` and ``rl.memory.*`` attributes at the end:

- ``rl.cpu.seconds``: the CPU seconds the whole process (all its threads: torch's intra-op
  pool, the exporter's) spent inside the span, user plus system, from ``getrusage(RUSAGE_SELF)``
  at its start and end. Process time, not the calling thread's: a torch worker's work runs on
  its pool threads. Over the span's wall time it says how busy the process was: 1.0 is one
  core kept busy, below 1 the process waited (I/O, a collective, a lock) or the machine did
  not give it a core (a busy host, a stopped process); above 1 several threads ran at once.
- ``rl.memory.rss_peak_bytes``: the process's resident-set high-water mark within the span. At the
  span's start ``5`` is written to ``/proc/self/clear_refs`` (Linux resets the mark, ``VmHWM``, to
  the current RSS); at its end the mark is read from the same ``getrusage`` call as the CPU time
  (``ru_maxrss``: Linux takes it from that counter, the larger of it and the peak before
  ``exec``). Where ``clear_refs`` is not writable (an old kernel, a locked-down container) the
  value is the process's peak so far, still an upper bound; where there is no ``getrusage``
  (not a Unix) no ``rl.cpu`` or ``rl.memory`` attribute is set.
- ``rl.memory.rss_rise_bytes``: how far that mark rose above the RSS at the span's start: what
  the span itself needed (a training micro-batch's saved activations, a forward's), apart from
  what the process already held. Right after the reset the mark *is* the RSS, so the start's
  ``getrusage`` gives it; without the reset it is read from ``/proc/self/statm``. Phases compare
  by it, since freed memory the allocator keeps stays in every later span's absolute mark.
- on CUDA (a process that has initialised it), ``rl.memory.cuda_peak_allocated_bytes`` and
  ``rl.memory.cuda_peak_reserved_bytes``: ``torch.cuda.reset_peak_memory_stats()`` at the start,
  ``max_memory_allocated()`` / ``max_memory_reserved()`` at the end. On a CPU they are absent.

The cost on a recording span is one ``write`` and two ``getrusage`` calls, on file descriptors
opened once per process (``bench/bench_spanspec.py`` measures it). A span that is not recording
(its group is off) costs one identity test: the shared no-op :data:`NO_RESOURCES` is returned.
Spans measured this way must not nest (the high-water mark is one per process).

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

from opentelemetry.trace import INVALID_SPAN

import spanspec

__all__ = [
    "KNOWN_PEAK_FLOPS",
    "NO_RESOURCES",
    "SpanResources",
    "current_rss",
    "flops_shape",
    "model_flops",
    "peak_flops",
    "process_cpu_seconds",
    "reset_rss_high_water_mark",
    "rss_high_water_mark",
    "span_resources",
]

try:
    from resource import RUSAGE_SELF as _SELF
    from resource import getrusage as _getrusage
except ImportError:  # not a Unix
    _getrusage, _SELF = None, 0

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_UNOPENED = -2
# The /proc files, opened on first use and kept open (-1: not available). /proc/self is
# resolved when a file is opened, so a forked child must open its own (os.register_at_fork).
_clear_refs = _UNOPENED
_statm = _UNOPENED


def _forget_fds() -> None:
    global _clear_refs, _statm
    _clear_refs = _statm = _UNOPENED


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_fds)


def _open(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return -1


def reset_rss_high_water_mark() -> bool:
    """Resets ``VmHWM`` to the current RSS; returns False where ``/proc/self/clear_refs`` is not
    writable (the mark then keeps the process's peak so far)."""
    global _clear_refs
    if _clear_refs == _UNOPENED:
        _clear_refs = _open("/proc/self/clear_refs", os.O_WRONLY)
    if _clear_refs < 0:
        return False
    try:
        os.write(_clear_refs, b"5")
    except OSError:
        _clear_refs = -1  # refused once: refused for good
        return False
    return True


def rss_high_water_mark() -> int | None:
    """Returns this process's resident-set high-water mark in bytes (``ru_maxrss``, kilobytes on
    Linux), or None where ``getrusage`` is missing."""
    if _getrusage is None:
        return None
    return _getrusage(_SELF).ru_maxrss * 1024


def process_cpu_seconds() -> float | None:
    """Returns the CPU seconds (user + system) this process's threads have used so far, or None
    where ``getrusage`` is missing."""
    if _getrusage is None:
        return None
    r = _getrusage(_SELF)
    return r.ru_utime + r.ru_stime


def current_rss() -> int | None:
    """Returns this process's resident set now, in bytes (None without ``/proc/self/statm``)."""
    global _statm
    if _statm == _UNOPENED:
        _statm = _open("/proc/self/statm", os.O_RDONLY)
    if _statm < 0:
        return None
    try:
        return int(os.pread(_statm, 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


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


class SpanResources:
    """Resets the high-water marks and reads the CPU clock on entry; annotates the span with the
    CPU seconds and peaks on exit."""

    __slots__ = ("_cpu", "_cuda", "_rss", "_span")

    def __init__(self, span: Any) -> None:
        self._span = span

    def __enter__(self) -> SpanResources:
        self._cuda = cuda = None if _no_cuda else _cuda()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        if _getrusage is None:
            self._cpu = None
            return self
        reset = reset_rss_high_water_mark()
        r = _getrusage(_SELF)
        if reset:
            self._rss = r.ru_maxrss  # right after the reset the mark is the RSS (kB)
        else:
            rss = current_rss()
            self._rss = None if rss is None else rss // 1024
        self._cpu = r.ru_utime + r.ru_stime
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._cpu is None:  # no getrusage
            attrs: dict[str, int | float] = {}
        else:
            r = _getrusage(_SELF)
            peak, start, cpu = r.ru_maxrss, self._rss, r.ru_utime + r.ru_stime - self._cpu
            attrs = {
                "rl.cpu.seconds": cpu if cpu > 0.0 else 0.0,
                "rl.memory.rss_peak_bytes": peak * 1024,
            }
            if start is not None:
                attrs["rl.memory.rss_rise_bytes"] = (peak - start) * 1024 if peak > start else 0
        cuda = self._cuda
        if cuda is not None:
            attrs["rl.memory.cuda_peak_allocated_bytes"] = int(cuda.max_memory_allocated())
            attrs["rl.memory.cuda_peak_reserved_bytes"] = int(cuda.max_memory_reserved())
        if attrs:
            spanspec.annotate(self._span, **attrs)


class _NoResources:
    __slots__ = ()

    def __enter__(self) -> _NoResources:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


NO_RESOURCES = _NoResources()
"""What :func:`span_resources` returns for a span that is not recording: does nothing."""


def span_resources(span: Any) -> SpanResources | _NoResources:
    """Returns a context manager that records the CPU time and memory peaks of ``span`` (see the
    module docstring); :data:`NO_RESOURCES` when the span is not recording."""
    if span is INVALID_SPAN or not span.is_recording():  # INVALID_SPAN: a disabled site's span
        return NO_RESOURCES
    return SpanResources(span)


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
