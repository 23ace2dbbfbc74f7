"""The error ``trinity run`` reports on one line: a run that could not start or failed."""


class RunError(RuntimeError):
    """The run could not start or one of its actors failed."""
