"""Group expressions on the repository's registry: presets, removal, case, errors."""

from __future__ import annotations

import pytest

import spanspec

REQUIRED_GROUPS = {
    "job", "step", "data_processing", "rollout", "generation", "logprob", "reference_policy",
    "reward", "advantage", "policy_update", "value_update", "checkpoint", "load_checkpoint",
    "evaluate", "model_init", "weight_sync", "idle",
}  # fmt: skip


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


def test_registry_declares_the_required_groups_and_buckets(spec):
    assert REQUIRED_GROUPS <= set(spec.groups)
    assert {g for g, d in spec.groups.items() if d.bucket is None} == {"job", "step", "rollout"}
    assert spec.groups["idle"].bucket == "idle"


def test_presets(spec):
    assert spec.resolve("default") == {"job", "checkpoint", "evaluate"}
    per_step = spec.resolve("per_step")
    assert "job" not in per_step and {"step", "rollout", "generation", "policy_update"} <= per_step
    assert spec.resolve("all") == set(spec.groups)


def test_removal_case_and_whitespace(spec):
    assert spec.resolve(" Per_Step , -GENERATION") == spec.resolve("per_step") - {"generation"}
    assert spec.resolve("all,-per_step") == {"job", "load_checkpoint", "model_init"}
    assert spec.resolve("") == frozenset()


def test_explain_names_what_turned_each_group_on(spec):
    why = spec.explain("all,rollout")
    assert why["job"] == "preset default"  # all -> default -> job: the innermost preset
    assert why["rollout"] == "preset per_step"
    assert spec.explain("rollout") == {"rollout": "group"}


def test_unknown_word_lists_valid_words_and_closest_match(spec):
    with pytest.raises(spanspec.SpecError) as info:
        spec.resolve("per_step,genration,zzz")
    messages = [f.message for f in info.value.findings]
    assert len(messages) == 2
    assert "unknown group or preset 'genration' (did you mean 'generation'?)" in messages[0]
    assert "valid presets: all, default, per_step; groups: advantage, checkpoint" in messages[0]
    assert "did you mean" not in messages[1]


def test_expansion_covers_every_algorithm_phase(spec):
    names = set(spec.spans)
    for algo in ["grpo", "ppo", "sft", "dpo", "rm", "distillation"]:
        assert {
            f"rl.{algo}.{p}" for p in ["job", "step", "policy_update", "checkpoint", "evaluate"]
        } <= names
    assert {"rl.ppo.value_update", "rl.distillation.teacher_logprob", "rl.vllm.generate"} <= names
    assert "rl.sft.rollout" not in names  # SFT has no rollout
    assert spec.spans["rl.ppo.rollout"].template == "rl.{algorithm}.rollout"
    assert spec.spans["rl.ppo.rollout"].algorithm == "ppo"
    assert spec.spans["rl.grpo.step"].required == {"rl.iteration"}


def test_enabled_spans_and_metric_span_feeds(spec):
    on = spec.enabled_spans("default,generation")
    assert "rl.grpo.job" in on and "rl.vllm.generate" in on and "rl.grpo.rollout" not in on
    assert spec.metrics["rl.rollout.duration"].spans == spec.spans_of_template(
        "rl.{algorithm}.rollout"
    )
    assert spec.metrics["rl.reward.mean"].from_keys[0] == "train/reward_mean"


def test_registry_declares_the_named_spans_and_metrics(spec):
    named = {
        "rl.vllm.generate": "generation",
        "rl.vllm.generate_text": "generation",
        "rl.vllm.load_model": "model_init",
        "rl.distillation.teacher_logprob": "logprob",
        "rl.grpo.weight_sync": "weight_sync",
        "rl.async_grpo.wait_for_trajectories": "idle",
        "rl.async_grpo.wait_for_weights": "idle",
    }
    assert {n: spec.spans[n].group for n in named if n in spec.spans} == named
    for name in ["rl.reward.mean", "rl.policy.loss", "rl.grad_norm", "rl.learning_rate"]:
        assert spec.metrics[name].instrument == "gauge" and spec.metrics[name].from_keys
    units = {n: (m.instrument, m.unit) for n, m in spec.metrics.items()}
    assert units["rl.throughput"] == ("gauge", "{token}/s")
    assert units["rl.rollout.duration"] == ("histogram", "s")
    assert units["gen_ai.client.operation.duration"] == ("histogram", "s")
    assert units["gen_ai.client.token.usage"] == ("histogram", "{token}")
    assert spec.metrics["gen_ai.client.operation.duration"].spans == {
        "rl.vllm.generate",
        "rl.vllm.generate_text",
        "rl.worker.generate",
    }
    instruments = {m.instrument for m in spec.metrics.values()}
    assert instruments == {"gauge", "counter", "histogram", "up_down_counter"}
    assert "per_step" in spec.presets["all"]  # a preset may name presets
