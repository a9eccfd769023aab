"""Suite-wide policy.

- A test marked ``slow`` (a training run that must learn) gets a hang guard of 900 s instead of
  the default 300 s, so a busy CI machine slows it down without failing it; a hang still fails.
- The files that take minutes run first, longest first: with two workers taking whole files
  (``--dist loadfile``), a long file handed out last keeps one worker busy while the other
  waits; small files at the end let the two finish together.
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
