"""The exception ml_comm raises ([Troubleshooting](troubleshooting.md) lists its messages)."""

from .core.errors import MLCommError

__all__ = ["MLCommError"]
