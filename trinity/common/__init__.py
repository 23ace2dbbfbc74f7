"""Import paths named by the user docs; re-exports only."""
