"""nemo_rl: a compact RL post-training stack (GRPO on a tiny LM), instrumented with spanspec.

The package is laid out by concern: ``data`` (tokenizer, datasets, collate), ``environments``
(verifiable tasks), ``models`` (policy and generation workers), ``distributed`` (Ray start-up and
trace-carrying actor calls), ``algorithms`` (GRPO and its math), ``utils`` (timer, logger,
checkpoint, config) and ``telemetry`` (the ``telemetry:`` block and process lifecycle).
"""

__version__ = "0.1.0"
