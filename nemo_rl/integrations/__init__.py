"""nemo_rl's telemetry in other trainers: :mod:`nemo_rl.integrations.trl` (Hugging Face TRL)."""
