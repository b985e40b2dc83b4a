"""The Debian packages the multi-node test bed (tools/testbed.sh) needs, installed when missing.

`tools/dev.py test` calls ensure_testbed_packages() before the test-bed suite, so that the
Quick start's test command runs that suite on a fresh root machine too (not only in CI). Only the
standard library is used: it runs before .venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess

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
APT_INSTALL = ("apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES)
INSTALL_TIMEOUT_S = 900


def missing_tools(which=shutil.which) -> list[str]:
    return [t for t in TOOLS if which(t) is None]


def ensure_testbed_packages() -> str | None:
    """Install PACKAGES when a tool is missing and we are root on a Debian-like system.

    Returns None when every tool is there (already, or after the install), else why not,
    in words the test summary can print. Never raises: a missing test bed skips its tests.
    """
    missing = missing_tools()
    if not missing:
        print(f"test bed: {', '.join(PACKAGES)} already present", flush=True)
        return None
    hint = f"apt-get install -y {' '.join(PACKAGES)}"
    if os.geteuid() != 0:
        return f"{', '.join(missing)} not installed, and installing needs root ({hint})"
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing)} not installed and no apt-get here ({hint} or equivalent)"
    print(f"test bed: {', '.join(missing)} missing; installing {' '.join(PACKAGES)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (("apt-get", "update", "-q"), APT_INSTALL):
        try:
            rc = subprocess.run(cmd, env=env, timeout=INSTALL_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            return f"`{' '.join(cmd)}` failed (exit {rc})"
    still = missing_tools()
    return f"{', '.join(still)} still missing after installing {hint}" if still else None
