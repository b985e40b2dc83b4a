"""Attributes of other libraries' classes that a front end of ml_comm replaces (the Keras
hook's wrapped `fit` and `apply`, the Horovod front end's Keras 3 shims), each kept with
what it replaced, so that they all go back at once.

Framework-free: the front end hands in the class, the name and the new value; each holds
one Patches for everything it replaces and restores it when it ends.
"""

from __future__ import annotations

_ABSENT = object()  # the class had no attribute of its own by that name (it inherited one)


class Patches:
    """Replaced attributes, restored in the reverse order of their replacement."""

    def __init__(self) -> None:
        self._saved: list[tuple[type, str, object]] = []

    def __bool__(self) -> bool:
        """Whether something is replaced."""
        return bool(self._saved)

    def replace(self, owner: type, name: str, value) -> None:
        """Set owner.name to value, keeping owner's own attribute (if any) to restore."""
        self._saved.append((owner, name, vars(owner).get(name, _ABSENT)))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Put back every replaced attribute (an added one is removed)."""
        while self._saved:
            owner, name, own = self._saved.pop()
            if own is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
