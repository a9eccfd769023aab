"""Batched sampling with the HF model in plain torch: the CPU generation backend and its Ray worker."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import spanspec
from nemo_rl.distributed import RankInfo, carries_trace, close_worker, init_worker
from nemo_rl.models.causal_lm import (
    ModelConfig,
    build_model,
    cache_kwarg,
    position_ids_from_mask,
)
from nemo_rl.models.generation.interface import (
    GenerationConfig,
    GenerationInterface,
    GenerationOutput,
    num_bytes,
)
from nemo_rl.models.pretrained import model_label
from nemo_rl.telemetry import record_token_usage
from nemo_rl.telemetry.genai import provider_attributes
from spanspec.export import TelemetryCost

__all__ = ["TorchGeneration"]


class TorchGeneration(GenerationInterface):
    """Samples from its own copy of the policy; ``update_weights`` refreshes that copy.

    ``model_name`` and ``model_cfg`` build the same model as the policy's (``build_model``: the
    tiny Llama from ``seed``, or the folder's weights). Used as a Ray actor
    (``spawn_actor(TorchGeneration, ...)``) or in-process in tests.
    """

    generate_span = "rl.worker.generate"

    def __init__(
        self,
        model_cfg: ModelConfig,
        model_name: str,
        gen_cfg: GenerationConfig,
        vocab_size: int,
        eos_token_id: int,
        pad_token_id: int,
        seed: int,
        info: RankInfo | None = None,
    ) -> None:
        info = info or RankInfo.alone("generation")
        init_worker(info)
        self.model_name = model_label(model_name)
        self.cfg = gen_cfg
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.rank = info.rank
        # A rank Ray gave a GPU samples there; else on the CPU.
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = build_model(model_name, model_cfg, vocab_size, seed).eval().to(self.device)

    @carries_trace
    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """Returns sampled (or greedy) responses; see ``GenerationInterface.generate``."""
        n_new = self.cfg.max_new_tokens
        temperature = 1.0 if greedy else self.cfg.temperature
        with spanspec.span(
            "rl.worker.generate",
            **{
                **provider_attributes("torch"),
                "gen_ai.operation.name": "text_completion",
                "gen_ai.request.model": self.model_name,
                "gen_ai.request.max_tokens": n_new,
                "gen_ai.request.temperature": float(temperature),
                "gen_ai.usage.input_tokens": int(attention_mask.sum()),
                "rl.worker.rank": self.rank,
            },
        ) as span:
            out = self._sample(input_ids, attention_mask, greedy, seed, temperature)
            n_out = int(out["response_mask"].sum())
            spanspec.annotate(span, **{"gen_ai.usage.output_tokens": n_out})
        record_token_usage(
            int(attention_mask.sum()), n_out, provider="torch", model=self.model_name
        )
        return out

    def _sample(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool,
        seed: int | None,
        temperature: float,
    ) -> GenerationOutput:
        on = self.device
        gen = torch.Generator(device=on)
        gen.manual_seed(0 if seed is None else seed)
        batch, prompt_len = input_ids.shape
        ids, mask = input_ids.to(on), attention_mask.to(on)
        logprobs = torch.zeros(batch, prompt_len, device=on)
        response_mask = torch.zeros(batch, prompt_len, dtype=torch.long, device=on)
        done = torch.zeros(batch, dtype=torch.bool, device=on)
        past = None
        cache = cache_kwarg()
        for _ in range(self.cfg.max_new_tokens):
            # With a KV cache only the newest column is fed after the first step.
            feed = ids if past is None else ids[:, -1:]
            pos = position_ids_from_mask(mask)
            out = self.model(
                input_ids=feed,
                attention_mask=mask,
                position_ids=pos if past is None else pos[:, -1:],
                use_cache=True,
                **{cache: past},
            )
            past = getattr(out, cache)
            logp = F.log_softmax(out.logits[:, -1].float() / temperature, dim=-1)
            if greedy:
                token = logp.argmax(-1)
            else:
                token = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(-1)
            alive = ~done
            token = torch.where(alive, token, torch.full_like(token, self.pad_token_id))
            ids = torch.cat([ids, token[:, None]], dim=1)
            mask = torch.cat([mask, alive.long()[:, None]], dim=1)
            response_mask = torch.cat([response_mask, alive.long()[:, None]], dim=1)
            picked = logp.gather(-1, token[:, None]).squeeze(-1) * alive
            logprobs = torch.cat([logprobs, picked[:, None]], dim=1)
            done = done | (alive & (token == self.eos_token_id))
        return GenerationOutput(
            output_ids=ids.cpu(),
            attention_mask=mask.cpu(),
            response_mask=response_mask.cpu(),
            logprobs=logprobs.cpu(),
            stopped=done.cpu(),
        )

    @carries_trace
    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Loads the policy's weights; returns the bytes received."""
        size = num_bytes(state_dict)
        with spanspec.span(
            "rl.worker.update_weights",
            **{"rl.weight_sync.num_bytes": size, "rl.worker.rank": self.rank},
        ):
            self.model.load_state_dict(state_dict)
        return size

    def close(self) -> TelemetryCost | None:
        """Flushes this worker's telemetry; call before the actor is killed. Returns what the
        worker's telemetry cost (None in-process)."""
        return close_worker()
