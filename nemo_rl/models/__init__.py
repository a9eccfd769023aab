"""Models: the tiny causal LM, the policy worker and the generation backends."""
