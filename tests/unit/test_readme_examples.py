"""The README's Python examples run as written, at 2 ranks, and its Quick start
block holds exactly the two commands CI relies on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MPIEXEC = Path(sys.prefix) / "bin" / "mpiexec"
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_quick_start_has_two_commands_and_ci_runs_the_second():
    section = README.split("## Quick start", 1)[1]
    block = re.search(r"```\n(.*?)```", section, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_example_runs_at_two_ranks(index, tmp_path):
    script = tmp_path / f"readme_{index}.py"
    script.write_text(PYTHON_BLOCKS[index])
    run = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_readme_has_examples():
    assert PYTHON_BLOCKS
