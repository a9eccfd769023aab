"""The statistics a run comparison uses: medians and the Mann-Whitney U test.

Only the standard library: a reader must not need scipy. The test is two-sided, with the normal
approximation of U's distribution, the correction for ties in its variance and a continuity
correction of 0.5 (as ``scipy.stats.mannwhitneyu(..., method="asymptotic")`` computes it).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MannWhitney", "mann_whitney_u", "median", "sorted_array"]

_CHUNK = 1 << 16


def sorted_array(values: Sequence[float]) -> array:
    """``values`` sorted, as an array of doubles (8 bytes a value). A long sample is sorted in
    chunks of 65,536 and merged, so no list of millions of float objects (32 bytes each) is held
    on the way: a comparison of two runs of millions of steps stays within the readers' memory.
    NaN, which orders against nothing, is for the caller to leave out."""
    if len(values) <= _CHUNK:
        return array("d", sorted(map(float, values)))
    runs = [
        array("d", sorted(map(float, values[i : i + _CHUNK])))
        for i in range(0, len(values), _CHUNK)
    ]
    return array("d", heapq.merge(*runs))


def median(values: Sequence[float], presorted: bool = False) -> float:
    """The median of ``values`` (the mean of the two middle ones for an even count); NaN for none.
    ``presorted``: ``values`` are in order already (:func:`sorted_array`)."""
    ordered = values if presorted else sorted_array(values)
    n = len(ordered)
    if not n:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class MannWhitney:
    """The result of :func:`mann_whitney_u`: ``u`` is the statistic of the first sample (the
    number of pairs in which it is the larger, ties counting one half), ``z`` the standardised
    statistic, ``p`` the two-sided p-value."""

    u: float
    z: float
    p: float


def mann_whitney_u(a: Sequence[float], b: Sequence[float], presorted: bool = False) -> MannWhitney:
    """Two-sided Mann-Whitney U test of ``a`` against ``b``, by the normal approximation.

    Ranks the pooled values (ties get their mean rank), ``U_a = R_a - n_a(n_a+1)/2``; its variance
    under the null hypothesis is ``n_a n_b / 12 * ((n+1) - sum(t^3 - t) / (n(n-1)))`` for tie
    groups of size ``t``; ``z = (|U_a - n_a n_b / 2| - 0.5) / sd`` and ``p = erfc(z / sqrt 2)``.

    ``presorted``: both samples are in order already (:func:`sorted_array`).

    Returns:
        The :class:`MannWhitney` result; ``p`` is 1.0 when a sample is empty or every value is
        the same (nothing to tell apart).
    """
    na, nb = len(a), len(b)
    if not na or not nb:
        return MannWhitney(0.0, 0.0, 1.0)
    # Ranks of the pooled values by a merge of the two samples sorted (a few bytes a value,
    # not a pooled list of pairs): ties, within a sample or across, share their mean rank.
    sa, sb = (a, b) if presorted else (sorted_array(a), sorted_array(b))
    rank_a = 0.0
    ties = 0.0
    i = j = done = 0
    while i < na or j < nb:
        v = sa[i] if j >= nb or (i < na and sa[i] <= sb[j]) else sb[j]
        ca = cb = 0
        while i < na and sa[i] == v:
            i, ca = i + 1, ca + 1
        while j < nb and sb[j] == v:
            j, cb = j + 1, cb + 1
        if not ca + cb:  # NaN equals nothing: a group of its own
            if j >= nb or (i < na and not sb[j] == sb[j]):
                i, ca = i + 1, 1
            else:
                j, cb = j + 1, 1
        t = ca + cb
        rank = done + (t + 1) / 2  # ranks done+1 .. done+t share their mean
        ties += t**3 - t
        rank_a += rank * ca
        done += t
    n = na + nb
    u = rank_a - na * (na + 1) / 2
    mean = na * nb / 2
    variance = na * nb / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return MannWhitney(u, 0.0, 1.0)
    z = max(0.0, abs(u - mean) - 0.5) / math.sqrt(variance)
    return MannWhitney(u, math.copysign(z, u - mean), min(1.0, math.erfc(z / math.sqrt(2))))
