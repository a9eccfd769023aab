"""The policy worker (one rank: trains a model with the loss its algorithm gives it, scores
log-probs and values) and the policy group (a role as N such ranks, data-parallel)."""

from nemo_rl.models.policy.group import PolicyGroup, SharedBatch
from nemo_rl.models.policy.worker import (
    LossFunction,
    PolicyConfig,
    PolicyWorker,
    TrainStats,
    read_policy_checkpoint,
)

__all__ = [
    "LossFunction",
    "PolicyConfig",
    "PolicyGroup",
    "PolicyWorker",
    "SharedBatch",
    "TrainStats",
    "read_policy_checkpoint",
]
