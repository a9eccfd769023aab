"""Timer, logger, checkpointing and config loading shared by every algorithm."""
