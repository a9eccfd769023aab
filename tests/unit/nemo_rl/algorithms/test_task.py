"""The run's task from a model folder and JSONL files, validated with the config: the examples
each loop reads, the verifier, the chat template, dropped prompts, what the start-up reports,
and one message naming the key and ``file:line`` for what cannot be used."""

import json

import pytest

from nemo_rl.algorithms import distillation, dpo, grpo, ppo, sft
from nemo_rl.algorithms.task import run_inputs
from nemo_rl.data import CharTokenizer, PreferencePair, write_jsonl
from nemo_rl.environments import MathEnvironment, Problem
from nemo_rl.models.tiny_hf import TINY_MODEL
from nemo_rl.utils.config import ConfigError, validate_config


def _files(tiny_hf) -> dict:
    return {
        "train_path": str(tiny_hf / "math_train.jsonl"),
        "val_path": str(tiny_hf / "math_val.jsonl"),
    }


def _grpo(tiny_hf, data=None, **sections):
    config = {
        "policy": {"model_name": str(tiny_hf / TINY_MODEL)},
        "data": {**_files(tiny_hf), **(data or {})},
        "env": {"name": "math"},
        **sections,
    }
    return validate_config(config, grpo.MasterConfig)


def _error(config: dict, model) -> str:
    with pytest.raises(ConfigError) as e:
        validate_config(config, model)
    assert len(e.value.problems) == 1, e.value.problems
    return e.value.problems[0]


def test_a_model_folder_and_jsonl_files_make_the_task_and_the_start_up_line(tiny_hf):
    cfg = _grpo(tiny_hf)
    task = grpo.common.make_task(cfg, seed=1)
    lines = (tiny_hf / "math_train.jsonl").read_text().splitlines()
    assert task.train[0] == Problem(**json.loads(lines[0]))
    assert len(task.train) == len(lines) and task.files == (
        str(tiny_hf / "math_train.jsonl"),
        str(tiny_hf / "math_val.jsonl"),
    )
    assert isinstance(task.env, MathEnvironment) and task.tokenizer.vocab_size == 15
    inputs = run_inputs(cfg)
    assert inputs.attributes() == {
        "rl.model": TINY_MODEL,
        "rl.num_parameters": 856_960,
        "rl.data.train_examples": len(lines),
        "rl.data.val_examples": len(task.val),
        "rl.data.prompts_dropped": 0,
        "rl.data.train_file": "math_train.jsonl",
        "rl.data.val_file": "math_val.jsonl",
    }
    assert inputs.line() == (
        f"model: {TINY_MODEL} (857K parameters), data: math_train.jsonl {len(lines)} examples, "
        f"math_val.jsonl {len(task.val)} held out"
    )


def test_builtin_task_keeps_its_seeded_split_and_says_so():
    cfg = grpo.MasterConfig()
    a, b = grpo.common.make_task(cfg, 3), grpo.common.make_task(cfg, 3)
    assert a.train == b.train and a.files is None and isinstance(a.tokenizer, CharTokenizer)
    assert (
        run_inputs(cfg)
        .line()
        .startswith(
            "model: tiny-llama (857K parameters), data: built-in arithmetic, 440 train / 110"
        )
    )
    assert "rl.data.train_file" not in run_inputs(cfg).attributes()


@pytest.mark.parametrize("loop", [sft, dpo], ids=["sft", "dpo"])
def test_every_loop_validates_on_the_builtin_task(loop):
    # DPO and RM make their pairs from the built-in problems, SFT learns their answers.
    cfg = validate_config({}, loop.MasterConfig)
    task = grpo.common.make_task(cfg, 0)
    assert task.train and all(isinstance(p, Problem) for p in task.train)


def test_each_loop_reads_its_own_fields(tiny_hf, tmp_path):
    # SFT: prompt -> response (here the math set's "answer" field, renamed)
    cfg = validate_config(
        {"data": {**_files(tiny_hf), "response_key": "answer"}, "sft": {"batch_size": 8}},
        sft.MasterConfig,
    )
    task = sft.common.make_task(cfg, 0)
    assert isinstance(task.train[0], Problem)
    # DPO / RM: prompt, chosen, rejected, one pair a line
    pairs = [{"prompt": "1+2=", "chosen": "3", "rejected": "4"}] * 3
    write_jsonl(str(tmp_path / "p.jsonl"), pairs)
    files = {"train_path": str(tmp_path / "p.jsonl"), "val_path": str(tmp_path / "p.jsonl")}
    cfg = validate_config({"data": files, "dpo": {"batch_size": 3}}, dpo.MasterConfig)
    task = dpo.common.make_task(cfg, 0)
    assert task.train == [PreferencePair("1+2=", "3", "4")] * 3
    assert dpo.sv.preference_data(task, cfg.dpo) == (task.train, task.val)
    problem = _error({"data": files, "dpo": {"batch_size": 4}}, dpo.MasterConfig)
    assert problem == (
        "dpo.batch_size=4 is more than the 3 training examples data.train_path gives; "
        "lower dpo.batch_size"
    )
    # GRPO's answer file has no "chosen": named with the file and line
    problem = _error({"data": _files(tiny_hf), "dpo": {"batch_size": 3}}, dpo.MasterConfig)
    assert f'data.train_path: {tiny_hf}/math_train.jsonl:1: no "chosen" field' in problem


def test_long_prompts_are_dropped_and_counted(tiny_hf):
    cfg = _grpo(tiny_hf, {"max_prompt_tokens": 5})  # bos + "9+9=" fits; "42+7=" does not
    task = grpo.common.make_task(cfg, 0)
    assert all(len(p.prompt) <= 4 for p in task.train + task.val)
    assert task.dropped == 440 + 110 - len(task.train) - len(task.val) > 0
    assert "dropped: prompt longer than data.max_prompt_tokens" in run_inputs(cfg).line()
    problem = _error(
        {**_grpo(tiny_hf).model_dump(), "data": {**_files(tiny_hf), "max_prompt_tokens": 2}},
        grpo.MasterConfig,
    )
    assert problem.startswith("data.max_prompt_tokens: every prompt of ") and "raise it" in problem


def test_a_chat_template_is_applied_when_asked_and_refused_without_one(tiny_hf, tmp_path):
    tok = CharTokenizer().to_hf()
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}={% endif %}"
    )
    tok.save_pretrained(str(tmp_path / "tok"))
    rows = [{"prompt": "1+2", "answer": "3"}]
    write_jsonl(str(tmp_path / "d.jsonl"), rows)
    files = {"train_path": str(tmp_path / "d.jsonl"), "val_path": str(tmp_path / "d.jsonl")}
    policy = {"model_name": str(tiny_hf / TINY_MODEL), "tokenizer": str(tmp_path / "tok")}
    config = {"policy": policy, "data": {**files, "chat_template": True}}
    task = grpo.common.make_task(validate_config(config, grpo.MasterConfig), 0)
    assert task.train == [Problem("1+2=", "3")]
    problem = _error({"data": {**_files(tiny_hf), "chat_template": True}}, grpo.MasterConfig)
    assert problem.startswith("data.chat_template: true, but the tokenizer (the built-in")


CONFIG_ERRORS = [
    # (case, data / env / policy changes, message start, words)
    ("val missing", {"data": {"val_path": None}}, "data.val_path: not set", []),
    ("train missing", {"data": {"train_path": None}}, "data.train_path: not set", []),
    (
        "train file missing",
        {"data": {"train_path": "/no/such.jsonl"}},
        "data.train_path: ",
        ["/no/such.jsonl: no such file"],
    ),
    (
        "env unknown",
        {"env": {"name": "maths"}},
        "env.name: ",
        ["'arithmetic', 'math' or 'exact'", "'maths'"],
    ),
]


@pytest.mark.parametrize(
    ("change", "start", "words"), [pytest.param(*c[1:], id=c[0]) for c in CONFIG_ERRORS]
)
def test_a_config_error_names_the_key(tiny_hf, change, start, words):
    config = {"policy": {"model_name": str(tiny_hf / TINY_MODEL)}, "data": _files(tiny_hf)}
    for section, values in change.items():
        config[section] = {**config.get(section, {}), **values}
    problem = _error(config, grpo.MasterConfig)
    assert problem.startswith(start), problem
    for w in words:
        assert w in problem, problem


def test_a_bad_answer_or_prompt_is_named_with_its_file_and_line(tiny_hf, tmp_path):
    write_jsonl(
        str(tmp_path / "d.jsonl"),
        [{"prompt": "1+2=", "answer": "3"}, {"prompt": "x", "answer": "three"}],
    )
    files = {"train_path": str(tmp_path / "d.jsonl"), "val_path": str(tmp_path / "d.jsonl")}
    problem = _error({"data": files, "env": {"name": "math"}}, grpo.MasterConfig)
    assert problem == (
        f"data.train_path: {tmp_path}/d.jsonl:2: answer 'three' holds no number "
        "(env.name=math compares numbers)"
    )
    problem = _error({"data": files, "env": {"name": "exact"}}, grpo.MasterConfig)
    assert problem.startswith(f"data.train_path: {tmp_path}/d.jsonl:2: character 'x' is not in")
    assert "set policy.tokenizer" in problem


def test_the_policy_names_resolve_and_a_too_large_tokenizer_is_refused(
    tiny_hf, tmp_path, monkeypatch
):
    monkeypatch.chdir(tiny_hf)
    cfg = validate_config({"policy": {"model_name": TINY_MODEL}}, grpo.MasterConfig)
    assert cfg.policy.model_name == str(tiny_hf / TINY_MODEL)  # workers may start elsewhere
    assert cfg.policy.label == TINY_MODEL and cfg.policy.tokenizer_folder() == cfg.policy.model_name
    CharTokenizer("0123456789+=abc").save_pretrained(str(tmp_path / "big"))
    problem = _error(
        {"policy": {"model_name": TINY_MODEL, "tokenizer": str(tmp_path / "big")}},
        grpo.MasterConfig,
    )
    assert problem.startswith(f"policy.tokenizer: {tmp_path}/big has 18 tokens, more than the 15")


def test_ppos_critic_starts_from_the_policys_folder_unless_given_one(tiny_hf):
    model = str(tiny_hf / TINY_MODEL)
    cfg = validate_config({"policy": {"model_name": model}}, ppo.MasterConfig)
    assert cfg.value.model_name == model and cfg.value.head == "scalar"
    cfg = validate_config(
        {
            "policy": {"model_name": model},
            "value": {"model_name": "tiny-llama-value", "head": "scalar"},
        },
        ppo.MasterConfig,
    )
    assert cfg.value.model_name == "tiny-llama-value"


def test_a_teacher_folder_teaches_as_it_is_when_its_vocabulary_is_the_students(tiny_hf, tmp_path):
    model = str(tiny_hf / TINY_MODEL)
    cfg = validate_config(
        {"policy": {"model_name": model}, "teacher": {"model_name": model}},
        distillation.MasterConfig,
    )
    assert cfg.teacher.checkpoint is None
    CharTokenizer("0123456789+=abc").save_pretrained(str(tmp_path / "big"))
    problem = _error(
        {
            "policy": {"model_name": "tiny-llama", "tokenizer": str(tmp_path / "big")},
            "teacher": {"model_name": model},
        },
        distillation.MasterConfig,
    )
    assert problem.startswith(
        "teacher.model_name: the teacher's vocabulary has 15 tokens, the student's 18"
    )
