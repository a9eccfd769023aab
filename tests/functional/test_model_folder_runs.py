"""Your own model and data, as a user tries it: ``scripts/make_tiny_hf.py`` writes a Hugging Face
model folder and a JSONL math set, then ``examples/run_grpo.py --config
examples/configs/grpo_hf.yaml`` and ``run_sft.py --config sft_hf.yaml`` train it for 3 steps in
subprocesses. Judged from what they leave: the start-up line, the traces (``rl.model`` names the
folder, the job span and every process's resource say its size and data), and the checkpoint's
Hugging Face folder, which ``AutoModelForCausalLM.from_pretrained`` loads as it is and which
answers greedily exactly as the policy did at that step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.traces import ROOT, live_check, read_spans, run_example

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 3
MODEL = "tiny-math-llama"
PARAMETERS = 856_960


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny_hf")
    proc = subprocess.run(
        [sys.executable, "scripts/make_tiny_hf.py", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"model: {out / MODEL}" in proc.stdout
    return out


@pytest.fixture(scope="module", params=["grpo", "sft"])
def run(request, tiny_hf, tmp_path_factory):
    algo = request.param
    log_dir = tmp_path_factory.mktemp(f"{algo}_hf")
    size = ["grpo.num_prompts_per_step=8"] if algo == "grpo" else ["sft.batch_size=16"]
    proc = run_example(
        f"run_{algo}.py",
        "--config",
        f"examples/configs/{algo}_hf.yaml",
        f"policy.model_name={tiny_hf / MODEL}",
        f"data.train_path={tiny_hf / 'math_train.jsonl'}",
        f"data.val_path={tiny_hf / 'math_val.jsonl'}",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"{algo}.max_steps={STEPS}",
        f"{algo}.val_period={STEPS}",
        f"checkpointing.save_period={STEPS}",
        "telemetry.exporter=file",
        "telemetry.span_groups=all",
        *size,
    )
    return algo, tiny_hf, log_dir, proc.stdout, read_spans(log_dir / "telemetry" / "traces.jsonl")


def test_the_start_up_line_says_which_model_and_data_ran(run):
    _, tiny_hf, _, stdout, _ = run
    train = len((tiny_hf / "math_train.jsonl").read_text().splitlines())
    val = len((tiny_hf / "math_val.jsonl").read_text().splitlines())
    assert (
        f"model: {MODEL} (857K parameters), data: math_train.jsonl {train} examples, "
        f"math_val.jsonl {val} held out"
    ) in stdout.splitlines()


def test_the_job_span_and_every_resource_name_the_folder_its_size_and_data(run):
    algo, tiny_hf, log_dir, _, spans = run
    (job,) = [s for s in spans if s["name"] == f"rl.{algo}.job"]
    facts = {
        "rl.model": MODEL,
        "rl.num_parameters": PARAMETERS,
        "rl.data.train_file": "math_train.jsonl",
        "rl.data.train_examples": len((tiny_hf / "math_train.jsonl").read_text().splitlines()),
        "rl.data.val_file": "math_val.jsonl",
        "rl.data.val_examples": len((tiny_hf / "math_val.jsonl").read_text().splitlines()),
        "rl.data.prompts_dropped": 0,
    }
    assert job["attrs"].items() >= facts.items()
    (init,) = [s for s in spans if s["name"] == f"rl.{algo}.model_init"]
    assert init["attrs"]["rl.model"] == MODEL
    groups = {s["resource"]["rl.worker.group"] for s in spans}
    assert groups == {"driver", "policy", "generation"}
    for s in spans:  # the driver wrote them into OTEL_RESOURCE_ATTRIBUTES: workers carry them
        resource = {k: str(v) for k, v in s["resource"].items()}
        assert resource.items() >= {k: str(v) for k, v in facts.items()}.items(), s["name"]
    for s in spans:
        if s["name"] == "rl.worker.generate":
            assert s["attrs"]["gen_ai.request.model"] == MODEL
    live_check(log_dir / "telemetry")


def _greedy_policy(tiny_hf: Path, checkpoint: Path, prompt_ids, mask) -> torch.Tensor:
    """The policy at the checkpoint's step answering greedily as the run's generation worker
    does: the folder's model with the resumable checkpoint's weights (policy.pt)."""
    from nemo_rl.models.causal_lm import ModelConfig
    from nemo_rl.models.generation.interface import GenerationConfig
    from nemo_rl.models.generation.torch_backend import TorchGeneration

    gen = TorchGeneration(
        ModelConfig(), str(tiny_hf / MODEL), GenerationConfig(max_new_tokens=3), 15, 2, 0, seed=0
    )
    state = torch.load(checkpoint / "policy" / "policy.pt", weights_only=True)["model"]
    gen.update_weights(state)
    out = gen.generate(prompt_ids, mask, greedy=True)
    return out["output_ids"][:, prompt_ids.shape[1] :]


def test_the_checkpoints_folder_loads_as_it_is_and_answers_as_the_policy_did(run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nemo_rl.data import left_pad
    from nemo_rl.environments import make_environment

    algo, tiny_hf, log_dir, _, _ = run
    checkpoint = log_dir / "checkpoints" / f"step_{STEPS}"
    folder = checkpoint / "policy" / "hf"
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert json.loads((folder / "config.json").read_text())["_name_or_path"] == MODEL
    rows = [json.loads(x) for x in (tiny_hf / "math_val.jsonl").read_text().splitlines()]
    ids, mask = left_pad(
        [tokenizer.encode(r["prompt"]) for r in rows], tokenizer.pad_token_id
    )  # the tokenizer puts bos in front, as the run did
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    by_hf = out[:, ids.shape[1] :]
    by_policy = _greedy_policy(tiny_hf, checkpoint, ids, mask)
    eos = tokenizer.eos_token_id

    def cut(row: list[int]) -> list[int]:  # up to eos: both pad after it
        return row[: row.index(eos) + 1] if eos in row else row

    for a, b in zip(by_hf.tolist(), by_policy.tolist(), strict=True):
        assert cut(a) == cut(b)
    # ... and scores the held-out set exactly as the run's validation after that step did
    env = make_environment({"grpo": "arithmetic", "sft": "exact"}[algo])  # as the yaml says
    responses = by_hf.tolist()
    correct = [
        env.is_correct(tokenizer.decode(cut(r), skip_special_tokens=True), row["answer"], eos in r)
        for r, row in zip(responses, rows, strict=True)
    ]
    logged = [json.loads(x) for x in (log_dir / "metrics.jsonl").read_text().splitlines()]
    (accuracy,) = [
        r["validation/accuracy"]
        for r in logged
        if r["step"] == STEPS and "validation/accuracy" in r
    ]
    assert sum(correct) / len(rows) == pytest.approx(accuracy)
