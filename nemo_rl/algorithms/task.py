"""The run's task: its tokenizer, its verifier and its train / held-out examples, from the built-in
arithmetic problems or from the ``data:`` files; and what the run reports about its model and
data at start-up (:class:`RunInputs`).

Every loop's ``setup`` calls ``common.make_task(cfg, seed)``. The config calls it too, while it is
validated (``RunSections``), so a bad dataset line, a verifier that cannot read an answer or a
prompt the tokenizer cannot encode stops the run before Ray starts, naming ``file:line``. Reading
a file happens once per process (the result is cached).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nemo_rl.data import PreferencePair, Tokenizer, load_tokenizer
from nemo_rl.data.jsonl import DataConfig, DataError, read_jsonl
from nemo_rl.environments import Environment, Problem, make_environment, make_problems
from nemo_rl.models.causal_lm import model_parameter_count
from nemo_rl.utils.config import ConfigError

__all__ = [
    "PAIR_ROLES",
    "PROBLEM_ROLES",
    "SFT_ROLES",
    "EnvConfig",
    "RunInputs",
    "Task",
    "make_task",
    "run_inputs",
]

PROBLEM_ROLES = ("prompt", "answer")
"""The fields GRPO, async GRPO, PPO and distillation read: a prompt and the answer to verify."""
SFT_ROLES = ("prompt", "response")
"""The fields SFT reads: a prompt and the response to learn."""
PAIR_ROLES = ("prompt", "chosen", "rejected")
"""The fields DPO and RM read: a prompt and a preferred and a dispreferred response."""


class EnvConfig(BaseModel):
    """The verifier, and the built-in arithmetic task (see ``nemo_rl.environments``)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["arithmetic", "math", "exact"] = "arithmetic"
    """The verifier scoring a response against its answer: ``arithmetic`` (the built-in task's
    shaped reward), ``math`` (the response's last number equals the answer numerically),
    ``exact`` (the stripped response equals the stripped answer)."""
    max_first: int = Field(99, ge=1)
    """Built-in task: largest first operand."""
    max_second: int = Field(9, ge=1)
    """Built-in task: largest second operand."""
    carry: bool = False
    """Built-in task: keep problems whose addition carries (much harder for a tiny policy)."""
    val_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Built-in task: share of the problems held out for validation."""


@dataclass
class Task:
    """The tokenizer, the verifier and the train / held-out examples of a run.

    Examples are :class:`~nemo_rl.environments.Problem` (prompt, answer; for SFT the answer is
    the response to learn) or, read from files by DPO and RM,
    :class:`~nemo_rl.data.PreferencePair`. Prompts are as the policy sees them (in the chat
    template when ``data.chat_template`` is on).
    """

    tokenizer: Tokenizer
    env: Environment
    train: list[Any]
    val: list[Any]
    files: tuple[str, str] | None = None
    """The ``(train, val)`` JSONL files the examples came from; None: the built-in task."""
    dropped: int = 0
    """Examples left out for a prompt longer than ``data.max_prompt_tokens``."""


def make_task(cfg: Any, seed: int) -> Task:
    """Returns the task of run config ``cfg`` (its ``policy`` tokenizer, ``env`` verifier and
    ``data`` files, or the arithmetic task split by ``seed``: the same seed, the same split).

    The examples have the fields ``type(cfg).DATA_ROLES`` names. Raises ``ValueError`` with one
    line naming the setting and, for a file, ``file:line``.
    """
    data: DataConfig = cfg.data
    policy = getattr(cfg, "policy", None)
    folder = policy.tokenizer_folder() if policy is not None else None
    roles = tuple(type(cfg).DATA_ROLES)
    if data.chat_template and not load_tokenizer(folder).has_chat_template:
        name = folder or "the built-in character tokenizer"
        raise ValueError(
            f"data.chat_template: true, but the tokenizer ({name}) has no chat template; set "
            "data.chat_template=false or use a tokenizer with one (policy.tokenizer)"
        )
    if data.train_path:
        train, val, dropped = _read_files(data, roles, folder, cfg.env.name)
        assert data.val_path is not None  # checked with train_path
        return Task(
            load_tokenizer(folder),
            make_environment(cfg.env.name),
            list(train),
            list(val),
            (data.train_path, data.val_path),
            dropped,
        )
    if data.val_path:
        raise ValueError("data.train_path: not set, but data.val_path is; give both files")
    env = cfg.env
    problems = make_problems(seed, env.max_first, env.max_second, env.carry, env.val_fraction)
    tok = load_tokenizer(folder)
    # Built-in problems are prompt and answer for every loop (DPO and RM make pairs of them).
    kind = roles if roles == SFT_ROLES else PROBLEM_ROLES
    (train, n_train), (val, n_val) = (_prepare(p, tok, data, kind, "env") for p in problems)
    for kept, name in ((train, "training"), (val, "held-out")):
        if not kept:
            raise ValueError(
                f"data.max_prompt_tokens: {data.max_prompt_tokens} leaves no {name} problem of "
                "the built-in task; raise it"
            )
    return Task(tok, make_environment(env.name), train, val, None, n_train + n_val)


@functools.lru_cache(maxsize=4)
def _read_files(
    data: DataConfig, roles: tuple[str, ...], folder: str | None, env_name: str
) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    if not data.val_path:
        raise ValueError(
            "data.val_path: not set; give a held-out JSONL file with the same fields "
            "(validation measures the policy on examples it never trained on)"
        )
    tok, env = load_tokenizer(folder), make_environment(env_name)
    out: list[Any] = []
    dropped = 0
    for setting, path in (("data.train_path", data.train_path), ("data.val_path", data.val_path)):
        assert path is not None
        rows = read_jsonl(path, roles, data, setting, numbers=("answer",))
        examples = []
        for line, fields in rows:
            where = f"{setting}: {path}:{line}"
            if "answer" in fields and (problem := env.answer_problem(fields["answer"])):
                raise DataError(f"{where}: {problem}")
            examples.append(_example(roles, fields))
        places = [f"{path}:{line}" for line, _ in rows]
        kept, n = _prepare(examples, tok, data, roles, setting, places)
        if not kept:
            raise DataError(
                f"data.max_prompt_tokens: every prompt of {path} is longer than "
                f"{data.max_prompt_tokens} tokens; raise it"
            )
        out.append(tuple(kept))
        dropped += n
    return out[0], out[1], dropped


def _example(roles: tuple[str, ...], fields: dict[str, str]) -> Any:
    if "chosen" in roles:
        return PreferencePair(fields["prompt"], fields["chosen"], fields["rejected"])
    # SFT's response is the answer its exact-match validation compares with.
    return Problem(fields["prompt"], fields["answer" if "answer" in roles else "response"])


# The example fields a loop feeds to the model besides the prompt (an RL answer only goes to the
# verifier; SFT's response is kept as its Problem's answer).
_COMPLETIONS = {PROBLEM_ROLES: (), SFT_ROLES: ("answer",), PAIR_ROLES: ("chosen", "rejected")}


def _prepare(
    examples: Sequence[Any],
    tok: Tokenizer,
    data: DataConfig,
    roles: tuple[str, ...],
    setting: str,
    where: Sequence[str] | None = None,
) -> tuple[list[Any], int]:
    """Returns the examples with their prompts in the chat template (when on) and without those
    longer than ``data.max_prompt_tokens``, and how many were dropped. Raises ``DataError``
    naming ``where[i]`` (``file:line``) for a text the tokenizer cannot encode."""
    kept, dropped = [], 0
    for i, example in enumerate(examples):
        prompt = tok.chat_prompt(example.prompt) if data.chat_template else example.prompt
        try:
            length = len(tok.encode(prompt, add_bos=True))
            for name in _COMPLETIONS[roles]:
                tok.encode(getattr(example, name))
        except ValueError as e:
            place = f"{setting}: {where[i]}" if where else setting
            raise DataError(
                f"{place}: {e} (the built-in character tokenizer knows only the arithmetic "
                "task's characters; set policy.tokenizer, or use a model folder with its own)"
            ) from None
        if data.max_prompt_tokens is not None and length > data.max_prompt_tokens:
            dropped += 1
            continue
        kept.append(dataclasses.replace(example, prompt=prompt) if data.chat_template else example)
    return kept, dropped


# -- what ran: the start-up line, the job span and the resource --------------------------------


@dataclass(frozen=True)
class RunInputs:
    """What a run trains and on what data: the start-up line, the job span and the driver's
    resource (so every process's) carry it."""

    model: str
    """The model's name (``rl.model``): ``tiny-llama``, or the folder's."""
    num_parameters: int
    """Parameters of the trained model (``rl.num_parameters``)."""
    train_examples: int
    """Training examples (built-in task: problems)."""
    val_examples: int
    """Held-out examples."""
    files: tuple[str, str] | None = None
    """The ``(train, val)`` JSONL files; None: the built-in arithmetic task."""
    prompts_dropped: int = 0
    """Examples left out for a prompt longer than ``data.max_prompt_tokens``."""

    def attributes(self) -> dict[str, Any]:
        """Returns the registry's attributes of the job span and the resource."""
        out: dict[str, Any] = {
            "rl.model": self.model,
            "rl.num_parameters": self.num_parameters,
            "rl.data.train_examples": self.train_examples,
            "rl.data.val_examples": self.val_examples,
            "rl.data.prompts_dropped": self.prompts_dropped,
        }
        if self.files is not None:
            out["rl.data.train_file"] = os.path.basename(self.files[0])
            out["rl.data.val_file"] = os.path.basename(self.files[1])
        return out

    def line(self) -> str:
        """Returns the start-up line: ``model: NAME (N parameters), data: ...``."""
        if self.files is None:
            data = f"built-in arithmetic, {self.train_examples} train / {self.val_examples} held-out problems"
        else:
            train, val = (os.path.basename(f) for f in self.files)
            data = f"{train} {self.train_examples} examples, {val} {self.val_examples} held out"
        if self.prompts_dropped:
            data += f" ({self.prompts_dropped} dropped: prompt longer than data.max_prompt_tokens)"
        return f"model: {self.model} ({_count(self.num_parameters)} parameters), data: {data}"


def _count(n: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def run_inputs(cfg: Any) -> RunInputs:
    """Returns what the run of config ``cfg`` trains (``cfg.policy`` and its parameter count, no
    weights read) and on what (its task, with its loop's seed). Raises ``ConfigError`` where
    :func:`make_task` raises (the config's own validation has already called it, so only a file
    changed since then does)."""
    try:
        task = make_task(cfg, cfg.section.seed)
    except ValueError as e:
        raise ConfigError([str(e)]) from None
    policy = cfg.policy
    return RunInputs(
        policy.label,
        model_parameter_count(
            policy.model_name, policy.model, task.tokenizer.vocab_size, policy.head
        ),
        len(task.train),
        len(task.val),
        task.files,
        task.dropped,
    )
