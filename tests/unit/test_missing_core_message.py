"""`import ml_comm` from a folder whose ml_comm holds no compiled core (a checkout's
source folder without an editable build) says that the core is missing and how to get
it, instead of "cannot import name '_core' from partially initialized module"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def source_copy(tmp_path: Path, checkout: bool) -> Path:
    """A copy of the package without its compiled module, as a checkout's source folder."""
    shutil.copytree(ROOT / "ml_comm", tmp_path / "ml_comm", ignore=shutil.ignore_patterns("*.so"))
    if checkout:
        (tmp_path / "csrc").mkdir()
        (tmp_path / "setup.py").write_text("")
    return tmp_path


def import_from(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, so no installed ml_comm (or editable finder) supplies the
    # core; the folder comes first on sys.path as the current folder does for python -m.
    return subprocess.run(
        [sys.executable, "-S", *args], cwd=folder, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("checkout", [True, False])
def test_import_without_the_compiled_core_says_so(tmp_path, checkout):
    folder = source_copy(tmp_path, checkout)
    proc = import_from(folder, "-c", "import sys; sys.path.insert(0, '.'); import ml_comm")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: ml_comm's compiled core (ml_comm._core, built by pip install) is missing: "
        f"Python imported ml_comm from {'the source folder of a checkout (' if checkout else ''}"
        f"{(folder / 'ml_comm').resolve()}"
    ), last
    assert 'pip install ".[tf,mpich]"' in last and "outside the source folder" in last, last
    assert "partially initialized" not in last, last


def test_check_command_in_a_checkout_says_so(tmp_path):
    proc = import_from(source_copy(tmp_path, True), "-m", "ml_comm", "--check")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "ml_comm's compiled core (ml_comm._core, built by pip install) is missing" in (
        proc.stderr
    ), proc.stderr
