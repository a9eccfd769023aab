"""Suite-wide policy: a test marked ``slow`` (a training run that must learn) gets a hang guard
of 900 s instead of the default 300 s, so a busy CI machine slows it down without failing it;
a hang still fails."""

import pytest

SLOW_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
