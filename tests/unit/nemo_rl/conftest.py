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


@pytest.fixture
def supervised_run(tmp_path):
    """Runs an SFT, DPO or RM loop in this process on real Ray actors (use with ``ray_cluster``).

    ``supervised_run(module, "run_a", "sft.max_steps=4", ...)`` loads
    ``examples/configs/<algo>_tiny.yaml`` with the overrides (telemetry off, logs under
    ``tmp_path/run_a``), sets up, trains and tears down; returns the ``SupervisedSetup`` and the
    ``RunSummary``.
    """
    from nemo_rl.algorithms import supervised
    from nemo_rl.utils.config import load_config

    def run(module, name: str, *overrides: str):
        algo = module.MasterConfig.SECTION
        cfg = load_config(
            f"examples/configs/{algo}_tiny.yaml",
            [
                f"logger.log_dir={tmp_path / name}",
                "logger.tqdm=false",
                "telemetry.enabled=false",
                *overrides,
            ],
            module.MasterConfig,
        )
        s = module.setup(cfg)
        try:
            summary = getattr(module, f"{algo}_train")(s)
        finally:
            supervised.teardown(s)
        return s, summary

    return run


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    """What ``scripts/make_tiny_hf.py`` writes, written once per session: returns the folder
    holding ``tiny-math-llama/`` (a Hugging Face model folder: a tiny Llama and its character
    tokenizer) and ``math_train.jsonl`` / ``math_val.jsonl``."""
    from nemo_rl.models.tiny_hf import TINY_MODEL, save_tiny_llama, write_math_set

    out = tmp_path_factory.mktemp("tiny_hf")
    save_tiny_llama(str(out / TINY_MODEL))
    write_math_set(str(out))
    return out
