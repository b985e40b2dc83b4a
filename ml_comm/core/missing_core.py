"""The message of an `import ml_comm` that finds no compiled core (ml_comm._core).

The core is compiled by `pip install`; the source folder of a checkout holds none
unless an editable install built it there. Python puts the current folder first on
sys.path for `python -m` and `python -c`, so from inside a checkout `import ml_comm`
finds the source folder, even with ml_comm installed in the environment, and without
this message fails with "cannot import name '_core' from partially initialized module".
"""

from __future__ import annotations

from pathlib import Path


def missing_core_message(package_dir: str) -> str:
    folder = Path(package_dir).resolve()
    checkout = (folder.parent / "csrc").is_dir() and (folder.parent / "setup.py").is_file()
    where = (
        f"Python imported ml_comm from the source folder of a checkout ({folder}), which "
        "holds no compiled core unless `pip install -e .` built it there"
        if checkout
        else f"Python imported ml_comm from {folder}, which holds no compiled core"
    )
    return (
        f"ml_comm's compiled core (ml_comm._core, built by pip install) is missing: {where}. "
        'Install ml_comm (`pip install ".[tf,mpich]"` in the checkout, without `mpich` where '
        "the environment has an MPI already, or "
        "`pip install -e .` to build the core in the source folder), or, with ml_comm "
        "installed, run Python from outside the source folder; docs/install.md"
    )
