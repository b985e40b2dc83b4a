"""SimGrid 3.32 from Debian (libsimgrid-dev: the library, headers, smpicc and smpirun),
installed when missing, for the scale model (`tools/dev.py project`).

Only the standard library is used: it runs before .venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PACKAGES = ("libsimgrid-dev",)
HEADER = Path("/usr/include/simgrid/s4u.hpp")
TOOLS = ("smpicc", "smpirun")
INSTALL_TIMEOUT_S = 900


def missing() -> list[str]:
    gone = [t for t in TOOLS if shutil.which(t) is None]
    return gone + ([str(HEADER)] if not HEADER.exists() else [])


def ensure_simgrid() -> str | None:
    """Install PACKAGES as root with apt-get when something is missing.

    Returns None when SimGrid is there (already, or after the install), else why not.
    """
    gone = missing()
    if not gone:
        return None
    hint = f"apt-get install -y {' '.join(PACKAGES)}"
    if os.geteuid() != 0:
        return f"{', '.join(gone)} not installed, and installing needs root ({hint})"
    if shutil.which("apt-get") is None:
        return f"{', '.join(gone)} not installed and no apt-get here ({hint} or equivalent)"
    print(f"simgrid: {', '.join(gone)} missing; installing {' '.join(PACKAGES)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ("apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES)
    for cmd in (("apt-get", "update", "-q"), install):
        try:
            rc = subprocess.run(cmd, env=env, timeout=INSTALL_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            return f"`{' '.join(cmd)}` failed (exit {rc})"
    still = missing()
    return f"{', '.join(still)} still missing after {hint}" if still else None
