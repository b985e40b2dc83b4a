"""The Python examples of the README and of the user guide's pages run as written, at 2
ranks, and none draws a warning from ml_comm (the README's three starts print one result
line: ranks, loss before and after, weights identical), and the README's Quick start
block holds exactly the two commands CI relies on.

In these pages every ```python block is a complete script; fragments are fenced without a
language."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MPIEXEC = Path(sys.prefix) / "bin" / "mpiexec"
GUIDE = ("keras", "tensorflow", "numpy", "api", "pipelined", "faults")
PAGES = [ROOT / "README.md", *(ROOT / "docs" / f"{name}.md" for name in GUIDE)]


def python_blocks() -> dict[str, str]:
    """Each distinct block once (a page may repeat the README's), named by page and index."""
    blocks: dict[str, str] = {}
    for page in PAGES:
        found = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
        for i, code in enumerate(found):
            if code not in blocks.values():
                blocks[f"{page.relative_to(ROOT)}-{i}"] = code
    return blocks


BLOCKS = python_blocks()
RESULT = re.compile(r"^ranks: 2, loss (\d+\.\d+) -> (\d+\.\d+), weights identical: True$", re.M)


def test_quick_start_has_two_commands_and_ci_runs_the_second():
    section = README.split("## Quick start", 1)[1]
    block = re.search(r"```\n(.*?)```", section, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == ["python3 tools/dev.py train", "python3 tools/dev.py test"]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_python_example_runs_at_two_ranks(name, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[name])
    run = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ml_comm: warning" not in run.stdout + run.stderr, run.stderr  # a model to copy
    if name.startswith("README.md"):  # the three starts: one result line, rank 0's
        results = RESULT.findall(run.stdout)
        assert len(results) == 1, run.stdout + run.stderr
        before, after = (float(v) for v in results[0])
        assert after < before, run.stdout


def test_readme_has_the_three_starts():
    starts = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(starts) == 3
    assert "ml_comm.keras" in starts[0] and "@tf.function" in starts[1]
    assert "tensorflow" not in starts[2] and "keras" not in starts[2]
