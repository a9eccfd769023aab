"""Suite-wide policy.

- A test marked ``slow`` (a training run that must learn) gets a hang guard of 900 s instead of
  the default 300 s, so a busy CI machine slows it down without failing it; a hang still fails.
- The files that take minutes come first, longest first. In one process that is the order they
  run in. With two workers taking whole files (``--dist loadfile``), xdist hands out the files
  with the most tests first, so this order only breaks its ties. Handing out every long file
  first (``--no-loadscope-reorder``) was tried and was slower: 30m12s instead of 25m11s from a
  fresh clone. Two long runs then shared the two cores for 20 minutes (a GRPO resume test took
  90 s instead of 46 s), where xdist's order pairs each long file with short ones.
"""

import pytest

SLOW_TIMEOUT_S = 900

# The longest files, longest first (summed test seconds in a CI run; the rest keep their order).
LONGEST_FIRST = (
    "tests/functional/test_data_parallel.py",
    "tests/functional/test_observability_stack.py",
    "tests/unit/nemo_rl/algorithms/test_grpo.py",
    "tests/functional/test_run_signals.py",
    "tests/unit/nemo_rl/algorithms/test_supervised.py",
    "tests/functional/test_bad_input_corpus.py",
    "tests/unit/nemo_rl/models/test_ranks_update_as_one.py",
    "tests/functional/test_trl.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)),
            position[id(item)],
        )
    )
