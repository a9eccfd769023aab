"""A set that does not grow a Python object per member: 64-bit fingerprints of hashable keys.

A reader that must remember one thing per span or trace of a file of gigabytes (the span ids
``live-check`` has seen, the traces ``view`` let go) keeps each as the 64-bit ``hash`` of its key
in an open-addressing table: 8 bytes a slot, at most half full, so 16 bytes or less a key, where a
Python set of string pairs takes a few hundred. Two keys share a fingerprint about once in 30
million sets of a million keys; ``hash`` of a string differs between processes, so a table
lives in one.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable

__all__ = ["Fingerprints"]


class Fingerprints:
    """The keys added, as 64-bit fingerprints (see the module's docstring)."""

    def __init__(self) -> None:
        self._table = array("Q", bytes(8 << 12))
        self._used = 0

    def __len__(self) -> int:
        return self._used

    def __contains__(self, key: Hashable) -> bool:
        return self._slot(key)[1]

    def add(self, key: Hashable) -> bool:
        """Add ``key``; return whether it was there before."""
        (i, mark), found = self._slot(key)
        if found:
            return True
        self._table[i] = mark
        self._used += 1
        if 2 * self._used > len(self._table):
            self._grow()
        return False

    def _slot(self, key: Hashable) -> tuple[tuple[int, int], bool]:
        mark = (hash(key) & 0xFFFFFFFFFFFFFFFF) or 1
        table = self._table
        mask = len(table) - 1
        i = mark & mask
        while (found := table[i]) != 0:
            if found == mark:
                return (i, mark), True
            i = (i + 1) & mask
        return (i, mark), False

    def _grow(self) -> None:
        old, self._table = self._table, array("Q", bytes(16 * len(self._table)))
        table, mask = self._table, len(self._table) - 1
        for mark in old:
            if mark:
                i = mark & mask
                while table[i]:
                    i = (i + 1) & mask
                table[i] = mark
