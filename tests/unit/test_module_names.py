"""Two test modules with one basename cannot both be collected in one pytest run (rootdir
imports): the suite stops at collection. Caught here, with the names, instead."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_basename_is_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
