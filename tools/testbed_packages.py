"""The Debian packages the multi-node test bed (tools/testbed.sh) needs, installed when missing.

`tools/dev.py test` calls ensure_testbed_packages() before the test-bed suite, so that the
Quick start's test command runs that suite on a fresh root machine too (not only in CI). Only the
standard library is used: it runs before .venv exists.
"""

from __future__ import annotations

import shutil

from debian_packages import install_when_missing

PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge", "iproute2")
# The programs tools/testbed.sh and tests/testbed/conftest.py run, from those packages.
TOOLS = (
    "slurmctld",
    "slurmd",
    "srun",
    "sinfo",
    "scontrol",
    "scancel",
    "munged",
    "mungekey",
    "ip",
    "tc",
    "nsenter",
    "unshare",
)


def missing_tools(which=shutil.which) -> list[str]:
    return [t for t in TOOLS if which(t) is None]


def ensure_testbed_packages() -> str | None:
    """Install PACKAGES when a tool is missing and we are root on a Debian-like system.

    Returns None when every tool is there (already, or after the install), else why not,
    in words the test summary can print. Never raises: a missing test bed skips its tests.
    """
    if not missing_tools():
        print(f"test bed: {', '.join(PACKAGES)} already present", flush=True)
        return None
    return install_when_missing("test bed", PACKAGES, missing_tools)
