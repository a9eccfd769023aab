"""The policy worker (a Ray actor): clipped-PG training, log-probs, weights and checkpoints."""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

import spanspec
from nemo_rl.algorithms.loss_functions import ClippedPGLossConfig, clipped_pg_loss
from nemo_rl.distributed import carries_trace, close_worker, init_worker
from nemo_rl.models.causal_lm import ModelConfig, build_causal_lm, token_logprobs

__all__ = ["PolicyConfig", "PolicyWorker"]


class PolicyConfig(BaseModel):
    """The trained model and how it is optimised."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = "tiny-llama"
    """Name reported in spans and metrics (``rl.model``, ``gen_ai.request.model``)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Shape of the tiny Llama."""
    lr: float = 1e-3
    """AdamW learning rate (after warm-up)."""
    warmup_steps: int = 0
    """Optimiser steps of linear learning-rate warm-up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm."""
    train_global_batch_size: int = 64
    """Sequences per optimiser step; a step's batch larger than this takes several steps."""
    train_micro_batch_size: int = 64
    """Sequences per forward/backward; gradients accumulate over micro-batches."""
    logprob_batch_size: int = 128
    """Sequences per forward when scoring log-probs."""
    train_passes: int = 2
    """Passes over each step's batch (PPO-style epochs); the ratio clip keeps later passes safe."""
    loss: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    """Coefficients of the clipped policy-gradient loss."""


class PolicyWorker:
    """Holds the policy, its optimiser and a frozen reference copy; every method is one request."""

    def __init__(
        self,
        cfg: PolicyConfig,
        vocab_size: int,
        seed: int,
        temperature: float = 1.0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        init_worker(rank, world_size, "policy")
        self.cfg = cfg
        self.rank = rank
        self.temperature = temperature
        self.model = build_causal_lm(cfg.model, vocab_size, seed)
        # The reference is the policy as it starts; frozen, it anchors the KL term.
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99)
        )
        warmup = max(cfg.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0
        )

    @carries_trace
    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Runs ``train_passes`` passes over ``batch`` in optimiser steps of ``train_global_batch_size``.

        ``batch`` holds ``input_ids``, ``attention_mask``, ``response_mask``, ``advantages``,
        ``prev_logprobs`` and ``ref_logprobs``. Returns the token-mean ``loss``, ``pg_loss``,
        ``kl``, ``clip_fraction``, the mean pre-clip ``grad_norm``, the ``lr`` used and
        ``num_tokens``. Raises ``ValueError`` if a batch key is missing.
        """
        missing = {
            "input_ids",
            "attention_mask",
            "response_mask",
            "advantages",
            "prev_logprobs",
            "ref_logprobs",
        } - batch.keys()
        if missing:
            raise ValueError(f"train batch is missing {sorted(missing)}")
        self.model.train()
        size = batch["input_ids"].shape[0]
        gbs, mbs = self.cfg.train_global_batch_size, self.cfg.train_micro_batch_size
        totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clipped": 0.0, "tokens": 0.0}
        grad_norms, lrs = [], []
        micro = 0
        starts = [s for _ in range(self.cfg.train_passes) for s in range(0, size, gbs)]
        for start in starts:
            mini = {k: v[start : start + gbs] for k, v in batch.items()}
            # Token-mean over the whole mini-batch, so the micro-batch split does not change it.
            n_tokens = float(mini["response_mask"].sum().clamp(min=1))
            for m_start in range(0, mini["input_ids"].shape[0], mbs):
                mb = {k: v[m_start : m_start + mbs] for k, v in mini.items()}
                with spanspec.span(
                    "rl.worker.train_microbatch",
                    **{
                        "rl.micro_batch": micro,
                        "rl.batch_size": mb["input_ids"].shape[0],
                        "rl.worker.rank": self.rank,
                    },
                ):
                    loss, stats = self._micro_batch_loss(mb)
                    (loss / n_tokens).backward()
                totals["loss"] += float(loss.detach())
                totals["pg_loss"] += float(stats["pg_loss_sum"])
                totals["kl"] += float(stats["kl_sum"])
                totals["clipped"] += float(stats["clipped_tokens"])
                totals["tokens"] += float(mb["response_mask"].sum())
                micro += 1
            with spanspec.span("rl.worker.optimizer_step", **{"rl.worker.rank": self.rank}):
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.cfg.max_grad_norm
                )
                lrs.append(self.optimizer.param_groups[0]["lr"])
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
            grad_norms.append(float(grad_norm))
        tokens = max(totals["tokens"], 1.0)
        return {
            "loss": totals["loss"] / tokens,
            "pg_loss": totals["pg_loss"] / tokens,
            "kl": totals["kl"] / tokens,
            "clip_fraction": totals["clipped"] / tokens,
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "lr": lrs[-1],
            "num_tokens": float(batch["attention_mask"].sum()),
            "num_optimizer_steps": float(len(grad_norms)),
        }

    def _micro_batch_loss(
        self, mb: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logprobs = token_logprobs(
            self.model, mb["input_ids"], mb["attention_mask"], self.temperature
        )
        return clipped_pg_loss(
            logprobs,
            mb["prev_logprobs"],
            mb["ref_logprobs"],
            mb["advantages"],
            mb["response_mask"],
            self.cfg.loss,
        )

    @carries_trace
    @torch.no_grad()
    def get_logprobs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Returns ``[B, T]`` log-probs of ``batch["input_ids"]`` under the current policy (0 at column 0)."""
        self.model.eval()
        return self._logprobs(self.model, batch, "policy")

    @carries_trace
    @torch.no_grad()
    def get_reference_logprobs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Returns ``[B, T]`` log-probs of ``batch["input_ids"]`` under the frozen reference policy."""
        return self._logprobs(self.reference, batch, "reference")

    def _logprobs(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor], group: str
    ) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with spanspec.span(
            "rl.worker.logprob",
            **{
                "rl.batch_size": ids.shape[0],
                "rl.worker.group": group,
                "rl.worker.rank": self.rank,
            },
        ):
            step = self.cfg.logprob_batch_size
            chunks = [
                token_logprobs(model, ids[i : i + step], mask[i : i + step], self.temperature)
                for i in range(0, ids.shape[0], step)
            ]
        return torch.cat(chunks)

    @carries_trace
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Returns a detached CPU copy of the policy weights, for the generation workers."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    @carries_trace
    def save_checkpoint(self, path: str) -> str:
        """Writes model, optimiser and scheduler state to ``path/policy.pt``; returns that file's path."""
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
        return file

    @carries_trace
    def load_checkpoint(self, path: str) -> None:
        """Restores the state written by ``save_checkpoint(path)``; raises ``FileNotFoundError`` if absent."""
        state: dict[str, Any] = torch.load(os.path.join(path, "policy.pt"), weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    @carries_trace
    def save_pretrained(self, path: str) -> str:
        """Writes the policy as a Hugging Face folder (config + safetensors) for vLLM; returns ``path``."""
        self.model.save_pretrained(path)
        return path

    def close(self) -> None:
        """Flushes this worker's telemetry; call before the actor is killed."""
        close_worker()
