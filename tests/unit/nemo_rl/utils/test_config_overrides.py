import pytest

from nemo_rl.algorithms.grpo import MasterConfig
from nemo_rl.utils.config import ConfigError, load_config

CONFIG = "examples/configs/grpo_tiny.yaml"


def test_example_config_loads_and_overrides_apply():
    cfg = load_config(
        CONFIG, ["grpo.max_steps=20", "telemetry.span_groups=all", "policy.lr=0.01"], MasterConfig
    )
    assert cfg.grpo.max_steps == 20
    assert cfg.telemetry.span_groups == "all"
    assert cfg.policy.lr == 0.01
    # interpolation: the trace files follow the run folder
    assert cfg.telemetry.file_dir == f"{cfg.logger.log_dir}/telemetry"


def test_unknown_key_is_named_with_the_closest_valid_one():
    with pytest.raises(ConfigError) as e:
        load_config(CONFIG, ["grpo.max_stepz=20"], MasterConfig)
    assert "grpo.max_stepz: unknown key (did you mean 'max_steps'?)" in e.value.problems


def test_unknown_nested_key_and_bad_type_are_both_reported():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["grpo.loss.ratio_clip=0.1", "grpo.max_steps=lots"], MasterConfig)
    problems = "\n".join(e.value.problems)
    assert "grpo.loss.ratio_clip: unknown key (did you mean 'ratio_clip_min'?)" in problems
    assert "grpo.max_steps:" in problems and "'lots'" in problems


def test_unknown_top_level_section_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"zzz: unknown key \(valid keys: [a-z, ]+\)") as e:
        load_config(None, ["zzz.a=1"], MasterConfig)
    valid = str(e.value).split("valid keys: ")[1].rstrip(")").split(", ")
    assert {"grpo", "policy", "generation", "telemetry"} <= set(valid)


def test_telemetry_block_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"telemetry\.expoter"):
        load_config(None, ["telemetry.expoter=file"], MasterConfig)


def test_malformed_override():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["grpo.max_steps"], MasterConfig)
