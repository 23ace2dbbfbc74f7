"""Small process-level helpers shared by every package."""
