"""Errors of weight synchronisation, importable without torch (the synchronizer actor's)."""


class SyncTimeout(TimeoutError):
    """The explorer waited longer than ``synchronizer.sync_timeout`` for new weights."""


class WeightBroadcastError(RuntimeError):
    """A member could not join the weight group or a broadcast did not complete."""
