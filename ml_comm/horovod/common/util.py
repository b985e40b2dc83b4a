"""`horovod.common.util` on ml_comm: the helpers scripts and test suites import from it."""

from __future__ import annotations

from packaging import version

from ..surface import check_extension, gpu_available, split_list  # noqa: F401


def is_version_greater_equal_than(ver: str, target: str) -> bool:
    """Whether version string `ver` is `target` or later (Horovod's check of framework
    versions)."""
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"versions must be strings, got {ver!r} and {target!r}")
    return version.parse(ver) >= version.parse(target)
