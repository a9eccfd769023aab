"""Post-training algorithms and the math they share."""
