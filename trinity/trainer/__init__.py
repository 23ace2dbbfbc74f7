"""Turning experiences into policy (and critic) updates, checkpoints and exports."""
