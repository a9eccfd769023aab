"""Fixtures shared by the nemo_rl unit tests: a local Ray cluster on 127.0.0.1."""

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster (no dashboard, loopback only), shut down after the module so tests
    elsewhere never see a Ray that is already running."""
    import ray

    from nemo_rl.distributed import init_ray

    init_ray(num_cpus=4)
    yield
    ray.shutdown()
