"""The policy worker (a Ray actor): trains a model with the loss it is given, scores log-probs,
and holds weights and checkpoints.

The worker knows no algorithm. Each algorithm hands it a :class:`LossFunction` (see
``nemo_rl.algorithms.loss_functions``): which batch keys it needs, what count its sums are
averaged over (response tokens, pairs, sequences), and ``(loss_sum, stat_sums)`` for a
micro-batch. The worker accumulates gradients over micro-batches, steps the optimiser, and
returns the sums of the loss and every statistic the loss reported with the count they average
over (:class:`TrainStats`).

A role with several ranks trains data-parallel: each rank is handed its part of every global
mini-batch (:func:`nemo_rl.distributed.batches.split_minibatches`), backpropagates its loss
*sums*, and the ranks sum their gradients and their counts in one all-reduce (the
``rl.worker.allreduce`` span) before dividing by the global count. The update is then the one a
single rank would make on the whole batch: the loss is normalised over the global batch (global
token counts, not a mean of per-rank means), gradient clipping sees the global norm, and every
rank steps the same optimiser state to the same weights. An explicit all-reduce rather than
DDP: one collective per optimiser step (DDP would reduce every micro-batch unless told not to),
a sum rather than DDP's mean (the global normalizer is not the number of ranks), and one span
that shows the time a fast rank waits for a slow one.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import ray
import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

import spanspec
from nemo_rl.data.tokenizer import load_tokenizer, tokenizer_folder_problem
from nemo_rl.distributed import (
    RankInfo,
    carries_trace,
    close_worker,
    free_port,
    init_worker,
    join_process_group,
)
from nemo_rl.models.causal_lm import (
    ModelConfig,
    build_model,
    next_token_logprobs,
    token_logprobs,
)
from nemo_rl.models.pretrained import (
    embedding_rows,
    is_builtin,
    model_folder_problem,
    model_label,
    save_folder,
)
from nemo_rl.telemetry.resources import flops_shape, model_flops
from spanspec.export import TelemetryCost

__all__ = ["LossFunction", "PolicyConfig", "PolicyWorker", "TrainStats", "read_policy_checkpoint"]

Batch = dict[str, torch.Tensor]


@runtime_checkable
class LossFunction(Protocol):
    """What an algorithm gives the worker to train with (picklable: it travels to the actor).

    Every tensor of a batch has the sequences (or pairs) on its first dimension; the worker
    slices all of them alike into mini- and micro-batches.
    """

    required_keys: frozenset[str]
    """Batch keys the loss reads; the worker checks them before training."""

    def normalizer(self, batch: Batch) -> torch.Tensor:
        """Returns the count the loss is averaged over in ``batch`` (tokens, pairs, ...)."""
        ...

    def __call__(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Batch]:
        """Returns ``(loss_sum, stats)``: sums over ``batch``; ``stats`` values are detached sums."""
        ...


class PolicyConfig(BaseModel):
    """The trained model and how it is optimised (the loss belongs to the algorithm's config)."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = "tiny-llama"
    """``tiny-llama`` (the built-in model, shaped by ``model``) or the path of a local Hugging
    Face causal-LM folder (``config.json``, safetensors weights, tokenizer files); spans and
    metrics name it by :attr:`label`."""
    tokenizer: str | None = Field(None, validate_default=True)
    """A Hugging Face tokenizer folder to use instead of the model folder's own (for
    ``tiny-llama``: instead of the built-in character tokenizer)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Shape of the built-in tiny Llama (unused for a folder)."""
    head: Literal["lm", "scalar"] = "lm"
    """``lm``: next-token logits (a policy); ``scalar``: one value per token (reward or value model)."""
    lr: float = Field(1e-3, gt=0.0)
    """AdamW learning rate (after warm-up)."""
    warmup_steps: int = Field(0, ge=0)
    """Optimiser steps of linear learning-rate warm-up."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradients are clipped to this global norm."""
    num_workers: int = Field(1, ge=1)
    """Ranks of this role (data-parallel): each trains on its share of every mini-batch and
    scores its share of every batch."""
    train_global_batch_size: int = Field(64, ge=1)
    """Sequences per optimiser step, over all ranks; a step's batch larger than this takes
    several steps. ``num_workers`` must divide it."""
    train_micro_batch_size: int = Field(64, ge=1)
    """Sequences per forward/backward on one rank; gradients accumulate over micro-batches."""
    logprob_batch_size: int = Field(128, ge=1)
    """Sequences per forward on one rank when scoring log-probs or values."""
    train_passes: int = Field(2, ge=1)
    """Passes over each step's batch (PPO-style epochs); the ratio clip keeps later passes safe."""
    checkpoint: str | None = None
    """Start from these weights instead of the model's own: a ``policy.pt``, or a run's
    ``step_<n>/`` folder."""

    @field_validator("model_name")
    @classmethod
    def _a_causal_lm_folder(cls, name: str) -> str:
        if is_builtin(name):
            return name
        problem = model_folder_problem(os.path.abspath(name))
        if problem:
            raise ValueError(problem)
        return os.path.abspath(name)  # workers may start in another working directory

    @field_validator("tokenizer")
    @classmethod
    def _a_tokenizer_that_fits(cls, path: str | None, info: ValidationInfo) -> str | None:
        model = info.data.get("model_name")
        if model is None:  # the model is refused already; its message says why
            return path
        if path is None:
            problem = None if is_builtin(model) else tokenizer_folder_problem(model)
            if problem:
                raise ValueError(f"not set, and {problem}; set it to a tokenizer folder")
            return None
        path = os.path.abspath(path)
        problem = tokenizer_folder_problem(path)
        if problem:
            raise ValueError(problem)
        if not is_builtin(model):
            tokens, rows = load_tokenizer(path).vocab_size, embedding_rows(model)
            if tokens > rows:
                raise ValueError(
                    f"{path} has {tokens} tokens, more than the {rows} rows of the model's "
                    f"embeddings (model_name: {model}): its ids past {rows - 1} would index no "
                    "row; use the model's own tokenizer, or one trained for it"
                )
        return path

    @property
    def label(self) -> str:
        """The model's name in spans and metrics (``rl.model``): ``tiny-llama``, or the folder's
        (its config's ``_name_or_path`` when that is a name)."""
        return model_label(self.model_name)

    def output_size(self, vocab_size: int) -> int:
        """Returns the size of the model's next-token distribution with a tokenizer of
        ``vocab_size`` tokens: that size for ``tiny-llama`` (built to fit), else the folder's
        embedding rows (often padded past its tokenizer's)."""
        return vocab_size if is_builtin(self.model_name) else embedding_rows(self.model_name)

    def tokenizer_folder(self) -> str | None:
        """The folder of the model's tokenizer, or None for the built-in character tokenizer."""
        if self.tokenizer is not None or is_builtin(self.model_name):
            return self.tokenizer
        return self.model_name


@dataclass
class TrainStats:
    """What one rank's ``train`` saw; :meth:`merge` turns the ranks' stats into the step's
    metrics, averaged over the global count."""

    sums: dict[str, float]
    """``loss`` and every statistic the loss reported, summed over this rank's micro-batches."""
    count: float
    """The loss's normalizer over this rank's rows (tokens, pairs, ...), every pass counted."""
    grad_norms: list[float] = field(default_factory=list)
    """The pre-clip global gradient norm of each optimiser step (the same on every rank)."""
    lr: float = 0.0
    """The learning rate of the last optimiser step."""
    num_micro_batches: int = 0
    """Forward/backward passes this rank ran, every pass counted."""
    num_tokens: float | None = None
    """Attended tokens of this rank's rows (over every ``*attention_mask``: both sides of a pair)."""
    flops: float = 0.0
    """Model FLOPs of this rank's forward and backward passes (see
    :func:`nemo_rl.telemetry.resources.model_flops`), every pass counted."""
    busy_s: float = 0.0
    """Seconds this rank spent in its micro-batches (forward and backward), its own work."""
    wait_s: float = 0.0
    """Seconds this rank spent in the gradient all-reduce (mostly waiting for the slowest rank)."""
    elapsed_s: float = 0.0
    """Seconds of the whole ``train`` call on this rank."""
    device: str = "cpu"
    """The device it trained on (``cpu``, or the CUDA device's name), for the peak FLOP/s."""

    def metrics(self) -> dict[str, float]:
        """Returns this rank's metrics alone (a group of one)."""
        return TrainStats.merge([self])

    @staticmethod
    def merge(ranks: Sequence[TrainStats]) -> dict[str, float]:
        """Returns the step's metrics from every rank's stats: ``loss`` and each statistic
        averaged over the global count, the mean pre-clip ``grad_norm``, the ``lr`` used,
        ``num_optimizer_steps``, ``num_micro_batches`` (per rank) and ``num_tokens`` (all ranks)."""
        count = max(sum(r.count for r in ranks), 1.0)
        keys = dict.fromkeys(k for r in ranks for k in r.sums)
        out = {k: sum(r.sums.get(k, 0.0) for r in ranks) / count for k in keys}
        first = ranks[0]
        out.update(
            grad_norm=sum(first.grad_norms) / max(len(first.grad_norms), 1),
            lr=first.lr,
            num_optimizer_steps=float(len(first.grad_norms)),
            num_micro_batches=first.num_micro_batches,
        )
        if first.num_tokens is not None:
            out["num_tokens"] = sum(r.num_tokens or 0.0 for r in ranks)
        flops = sum(r.flops for r in ranks)
        if flops:
            out["flops"] = flops
            out["flops_per_sec"] = flops / max(max(r.elapsed_s for r in ranks), 1e-9)
        if len(ranks) > 1:  # the time the faster ranks lost waiting for the slowest
            least = min(r.wait_s for r in ranks)
            out["rank_wait_s"] = sum(r.wait_s - least for r in ranks)
        return out


class PolicyWorker:
    """Holds a model, its optimiser and (optionally) a frozen reference copy; every method is one request."""

    def __init__(
        self,
        cfg: PolicyConfig,
        vocab_size: int,
        seed: int,
        loss_fn: LossFunction | None = None,
        temperature: float = 1.0,
        reference: bool = True,
        info: RankInfo | None = None,
    ) -> None:
        self.info = info or RankInfo.alone("policy")
        init_worker(self.info)
        self.cfg = cfg
        self.rank = self.info.rank
        self.group = self.info.group
        self.loss_fn = loss_fn
        self.temperature = temperature
        # A rank Ray gave a GPU trains there (NCCL between ranks); else on the CPU (gloo).
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # Every rank builds the same start: the tiny Llama from the same seed, or the folder's
        # weights, which every rank reads itself.
        self.model = build_model(cfg.model_name, cfg.model, vocab_size, seed, cfg.head)
        if cfg.checkpoint:
            self.model.load_state_dict(read_policy_checkpoint(cfg.checkpoint)["model"])
        self.model.to(self.device)
        self.flops_shape = flops_shape(self.model)  # (N, layers, hidden) for model FLOPs
        # The reference is the model as it starts; frozen, it anchors a KL term or a DPO margin.
        self.reference = (
            copy.deepcopy(self.model).eval().requires_grad_(False) if reference else None
        )
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99)
        )
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0
        )

    # -- the process group (a role of several ranks) ------------------------------------------

    @carries_trace
    def rendezvous(self) -> tuple[str, int]:
        """Returns where the group's ranks meet (this node's address and a free port); asked of
        rank 0, never a fixed port."""
        return ray.util.get_node_ip_address(), free_port()

    @carries_trace
    def join(self, address: str, port: int) -> None:
        """Joins this rank to its role's ``torch.distributed`` group at ``address:port``."""
        join_process_group(self.info, address, port)

    # -- training -----------------------------------------------------------------------------

    @carries_trace
    def train(self, batch: Batch, loss_fn: LossFunction | None = None) -> TrainStats:
        """Runs ``train_passes`` passes over this rank's rows in optimiser steps of its share of
        each global mini-batch (``train_global_batch_size / world_size`` rows), micro-batches of
        ``train_micro_batch_size``.

        Trains with ``loss_fn`` (default: the one given at construction). Returns this rank's
        :class:`TrainStats` (``TrainStats.merge`` of every rank's gives the step's metrics).
        Raises ``ValueError`` if the loss's batch keys are missing or no loss was given.
        """
        loss_fn = loss_fn or self.loss_fn
        if loss_fn is None:
            raise ValueError("no loss function: pass one to PolicyWorker(...) or train(...)")
        missing = loss_fn.required_keys - batch.keys()
        if missing:
            raise ValueError(f"train batch is missing {sorted(missing)}")
        self.model.train()
        size = next(iter(batch.values())).shape[0]
        local_gbs = max(1, self.cfg.train_global_batch_size // self.info.world_size)
        mbs = self.cfg.train_micro_batch_size
        stats = TrainStats(sums={"loss": 0.0}, count=0.0, device=self._device_name())
        began = time.perf_counter()
        starts = [s for _ in range(self.cfg.train_passes) for s in range(0, size, local_gbs)]
        for start in starts:
            mini = {k: v[start : start + local_gbs] for k, v in batch.items()}
            mini_count = 0.0
            for m_start in range(0, len(next(iter(mini.values()))), mbs):
                mb = {k: v[m_start : m_start + mbs].to(self.device) for k, v in mini.items()}
                tokens, seq_len = _tokens(mb)
                flops = model_flops(self.flops_shape, tokens, seq_len, training=True)
                with spanspec.span(
                    "rl.worker.train_microbatch",
                    **{
                        "rl.micro_batch": stats.num_micro_batches,
                        "rl.batch_size": len(next(iter(mb.values()))),
                        "rl.worker.rank": self.rank,
                    },
                ) as span:
                    start = time.perf_counter()
                    loss, loss_stats = loss_fn(self.model, mb)
                    loss.backward()  # a sum: divided by the global count once all ranks add up
                    busy = time.perf_counter() - start
                    _annotate_work(span, tokens, flops, busy)
                stats.busy_s += busy
                stats.flops += flops
                stats.sums["loss"] += float(loss.detach())
                for key, value in loss_stats.items():
                    stats.sums[key] = stats.sums.get(key, 0.0) + float(value)
                mini_count += float(loss_fn.normalizer(mb))
                stats.num_micro_batches += 1
            stats.count += mini_count
            stats.wait_s += self._average_gradients(mini_count)
            with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": self.rank}) as span:
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.cfg.max_grad_norm
                )
                stats.lr = self.optimizer.param_groups[0]["lr"]
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
            stats.grad_norms.append(float(grad_norm))
        masks = [v for k, v in batch.items() if k.endswith("attention_mask")]  # pairs: both sides
        if masks:
            stats.num_tokens = float(sum(m.sum() for m in masks))
        stats.elapsed_s = time.perf_counter() - began
        return stats

    def _device_name(self) -> str:
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"

    def _average_gradients(self, count: float) -> float:
        """Divides the gradients (of loss sums) by the mini-batch's count over every rank, after
        summing them over the ranks: one all-reduce of the flattened gradients and the count.
        Returns the seconds spent in the all-reduce (0 for a group of one)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        waited = 0.0
        if self.info.world_size > 1:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            total = torch.tensor([count], dtype=grads[0].dtype, device=self.device)
            flat = torch.cat([*(g.reshape(-1) for g in grads), total])
            with spanspec.span(
                "rl.worker.allreduce",
                **{
                    "rl.worker.rank": self.rank,
                    "rl.collective.num_bytes": flat.numel() * flat.element_size(),
                },
            ):
                start = time.perf_counter()
                dist.all_reduce(flat)
                waited = time.perf_counter() - start
            count = float(flat[-1])
            offset = 0
            for p in params:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p).clone()
                offset += n
        scale = 1.0 / max(count, 1.0)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        return waited

    @carries_trace
    @torch.no_grad()
    def get_logprobs(self, batch: Batch) -> torch.Tensor:
        """Returns ``[B, T]`` log-probs of ``batch["input_ids"]`` under the current model (0 at column 0)."""
        self.model.eval()
        return self._score(self.model, batch, "policy")

    @carries_trace
    @torch.no_grad()
    def get_next_token_logprobs(self, batch: Batch) -> torch.Tensor:
        """Returns ``[B, T, V]``: row ``t`` the current model's log-distribution over the
        vocabulary of token ``t`` of ``batch["input_ids"]`` (row 0 zeros); a distillation
        teacher's whole next-token distribution at each of the student's positions."""
        self.model.eval()
        return self._score(self.model, batch, "policy", full=True)

    @carries_trace
    @torch.no_grad()
    def get_reference_logprobs(self, batch: Batch) -> torch.Tensor:
        """Returns ``[B, T]`` log-probs of ``batch["input_ids"]`` under the frozen reference.

        Raises ``ValueError`` if the worker was made with ``reference=False``.
        """
        if self.reference is None:
            raise ValueError("this worker keeps no reference model (reference=False)")
        return self._score(self.reference, batch, "reference")

    @carries_trace
    @torch.no_grad()
    def get_values(self, batch: Batch) -> torch.Tensor:
        """Returns ``[B, T]`` per-token scalars of a ``head: scalar`` model (a value or reward model)."""
        self.model.eval()
        return self._score(self.model, batch, "value")

    def _score(
        self, model: torch.nn.Module, batch: Batch, kind: str, full: bool = False
    ) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        scalar = self.cfg.head == "scalar"
        if scalar != (kind == "value"):
            raise ValueError(f"a head={self.cfg.head!r} model cannot give {kind} scores")
        lm_scores = next_token_logprobs if full else token_logprobs
        with spanspec.span(
            "rl.worker.logprob",
            **{
                "rl.batch_size": ids.shape[0],
                # who scored: the reference copy, or this worker's own group (policy, value, teacher)
                "rl.worker.group": kind if kind == "reference" else self.group,
                "rl.worker.rank": self.rank,
            },
        ) as span:
            start = time.perf_counter()
            step, on = self.cfg.logprob_batch_size, self.device
            chunks = [
                (
                    model(ids[i : i + step].to(on), mask[i : i + step].to(on))
                    if scalar
                    else lm_scores(
                        model, ids[i : i + step].to(on), mask[i : i + step].to(on), self.temperature
                    )
                ).cpu()
                for i in range(0, ids.shape[0], step)
            ]
            if span.is_recording():
                tokens = int(mask.sum())
                flops = model_flops(self.flops_shape, tokens, ids.shape[1], training=False)
                _annotate_work(span, tokens, flops, time.perf_counter() - start)
        return torch.cat(chunks)

    @carries_trace
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Returns a detached CPU copy of the model weights, for the generation workers."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    @carries_trace
    def weight_bytes(self) -> int:
        """Returns the size of the model's weights in bytes (what a weight sync moves)."""
        return sum(v.numel() * v.element_size() for v in self.model.state_dict().values())

    @carries_trace
    def save_checkpoint(self, path: str) -> str:
        """Writes model, optimiser and scheduler state to ``path/policy.pt`` (what a run resumes
        from) and, for an ``lm`` model, the model and its tokenizer as a Hugging Face folder in
        ``path/hf/`` (what ``AutoModelForCausalLM.from_pretrained`` loads as it is); returns
        the ``policy.pt`` file's path."""
        os.makedirs(path, exist_ok=True)
        file = os.path.join(path, "policy.pt")
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
            },
            file,
        )
        if self.cfg.head == "lm":
            self.save_pretrained(os.path.join(path, "hf"))
        return file

    @carries_trace
    def load_checkpoint(self, path: str) -> None:
        """Restores the state written by ``save_checkpoint(path)``; raises ``FileNotFoundError`` if absent."""
        state = read_policy_checkpoint(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    @carries_trace
    def save_pretrained(self, path: str) -> str:
        """Writes an ``lm`` model as a Hugging Face folder: config, safetensors weights and the
        tokenizer's files, its config naming the model (:attr:`PolicyConfig.label`); for vLLM
        and for a checkpoint. Returns ``path``."""
        tokenizer = load_tokenizer(self.cfg.tokenizer_folder())
        return save_folder(self.model, tokenizer, path, self.cfg.label)

    def close(self) -> TelemetryCost | None:
        """Flushes this worker's telemetry; call before the actor is killed. Returns what the
        worker's telemetry cost (None in-process)."""
        return close_worker()


def _tokens(batch: Batch) -> tuple[int, int]:
    """Returns the attended tokens of ``batch`` (every ``*attention_mask``: both sides of a pair)
    and its padded sequence length."""
    masks = [v for k, v in batch.items() if k.endswith("attention_mask")]
    if not masks:
        ids = batch.get("input_ids")
        return (int(ids.numel()), int(ids.shape[-1])) if ids is not None else (0, 0)
    return int(sum(int(m.sum()) for m in masks)), int(max(m.shape[-1] for m in masks))


def _annotate_work(span: Any, tokens: int, flops: int, seconds: float) -> None:
    """Sets the span's tokens, model FLOPs and their rates (nothing when it is not recording)."""
    if not span.is_recording():
        return
    per_s = 1.0 / max(seconds, 1e-9)
    spanspec.annotate(
        span,
        **{
            "rl.num_tokens": tokens,
            "rl.flops": flops,
            "rl.flops_per_second": flops * per_s,
            "rl.tokens_per_second": tokens * per_s,
        },
    )


def read_policy_checkpoint(path: str) -> dict[str, Any]:
    """Returns the state a ``PolicyWorker`` saved (``model``, optimiser, scheduler) from a
    ``policy.pt``, the worker folder holding one, or a run's ``step_<n>/`` folder
    (``policy/policy.pt``); raises ``FileNotFoundError`` when there is none."""
    for file in (path, os.path.join(path, "policy.pt"), os.path.join(path, "policy", "policy.pt")):
        if os.path.isfile(file):
            return torch.load(file, weights_only=True, map_location="cpu")
    raise FileNotFoundError(f"{path}: no policy.pt there (nor in {path}/policy/)")
