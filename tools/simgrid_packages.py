"""SimGrid 3.32 from Debian (libsimgrid-dev: the library, headers, smpicc and smpirun),
installed when missing, for the scale model (`tools/dev.py project`).

Only the standard library is used: it runs before .venv exists.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from debian_packages import install_when_missing

PACKAGES = ("libsimgrid-dev",)
HEADER = Path("/usr/include/simgrid/s4u.hpp")
TOOLS = ("smpicc", "smpirun")


def missing() -> list[str]:
    gone = [t for t in TOOLS if shutil.which(t) is None]
    return gone + ([str(HEADER)] if not HEADER.exists() else [])


def ensure_simgrid() -> str | None:
    """Install PACKAGES as root with apt-get when something is missing.

    Returns None when SimGrid is there (already, or after the install), else why not.
    """
    return install_when_missing("simgrid", PACKAGES, missing)
