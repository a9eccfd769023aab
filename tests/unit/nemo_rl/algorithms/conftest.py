"""One local Ray cluster for every loop's tests in this folder: the same ``init_ray(num_cpus=4)``
as ``tests/unit/nemo_rl/conftest.py``'s, started by the first test that asks for it and shut
down after the folder's last test, instead of once per module (each start and stop costs a few
seconds of the CI budget). Every run here spawns its own workers and stops them in teardown, so
nothing of one module's runs is left for the next; tests outside this folder still never see a
Ray that is already running."""

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    import ray

    from nemo_rl.distributed import init_ray

    init_ray(num_cpus=4)
    yield
    ray.shutdown()
