"""Weights from the trainer to the rollout engines."""
