"""The exception ml_comm raises (defined in core/errors.py, which every layer uses)."""

from .core.errors import MLCommError

__all__ = ["MLCommError"]
