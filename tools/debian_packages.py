"""Installing missing Debian packages as root with apt-get, for the tools that need
system packages before .venv exists (tools/simgrid_packages.py, tools/testbed_packages.py).

Only the standard library is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

INSTALL_TIMEOUT_S = 900


def install_when_missing(
    label: str, packages: Sequence[str], missing: Callable[[], list[str]]
) -> str | None:
    """Install `packages` with apt-get when `missing()` names anything, if we are root.

    Returns None when nothing is missing (already, or after the install), else why not,
    in words a summary can print. Never raises. `label` opens the progress line.
    """
    gone = missing()
    if not gone:
        return None
    hint = f"apt-get install -y {' '.join(packages)}"
    if os.geteuid() != 0:
        return f"{', '.join(gone)} not installed, and installing needs root ({hint})"
    if shutil.which("apt-get") is None:
        return f"{', '.join(gone)} not installed and no apt-get here ({hint} or equivalent)"
    print(f"{label}: {', '.join(gone)} missing; installing {' '.join(packages)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ("apt-get", "install", "-y", "-q", "--no-install-recommends", *packages)
    for cmd in (("apt-get", "update", "-q"), install):
        try:
            rc = subprocess.run(cmd, env=env, timeout=INSTALL_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            return f"`{' '.join(cmd)}` failed (exit {rc})"
    still = missing()
    return f"{', '.join(still)} still missing after {hint}" if still else None
