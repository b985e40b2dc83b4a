"""Exceptions raised by ml_comm."""


class MLCommError(RuntimeError):
    """ml_comm is in the wrong state for the call, or the communication failed."""
