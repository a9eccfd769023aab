"""The policy worker: trains the policy, scores log-probs, holds the frozen reference."""

from nemo_rl.models.policy.worker import PolicyConfig, PolicyWorker

__all__ = ["PolicyConfig", "PolicyWorker"]
