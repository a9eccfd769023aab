"""Generation backends behind one interface: token ids in, tokens and their log-probs out."""

from nemo_rl.models.generation.interface import (
    GenerationConfig,
    GenerationInterface,
    GenerationOutput,
    VllmEngineConfig,
)

__all__ = ["GenerationConfig", "GenerationInterface", "GenerationOutput", "VllmEngineConfig"]
