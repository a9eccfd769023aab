"""The policy worker: trains a model with the loss its algorithm gives it, scores log-probs and values."""

from nemo_rl.models.policy.worker import (
    LossFunction,
    PolicyConfig,
    PolicyWorker,
    read_policy_checkpoint,
)

__all__ = ["LossFunction", "PolicyConfig", "PolicyWorker", "read_policy_checkpoint"]
