"""Raw result files stay in the tree only while a page or a program cites them, and
benchmarks/RESULTS.md stays within 25 KB (tools/results_cited.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import results_cited as rc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def cites(text: str, path: str) -> bool:
    return rc.cited(path, rc.patterns(text))


def test_citations_as_people_write_them():
    assert cites("`benchmarks/results/wait_cpu.txt`", "wait_cpu.txt")
    assert cites("(`results/product/run.sh`)", "product/run.sh")
    assert cites("`testbed_quiet/{3,4}node_gradients_r*`", "testbed_quiet/4node_gradients_r2.json")
    assert cites("`train_scaling_{2gbit_b8,1gbit_b8}.{json,png}`", "train_scaling_1gbit_b8.png")
    assert cites("files `b8_rerun`", "train_scaling_2gbit_b8_rerun.json")
    assert cites("`rabenseifner/`", "rabenseifner/n4_ring_r1.json")
    assert cites("`mpich_yield_ofi.txt`", "testbed_quiet/mpich_yield_ofi.txt")


def test_what_names_nothing_cites_nothing():
    assert not cites("`*.json` and `r1`", "testbed_quiet/4node_gradients_r1.json")
    assert not cites("`testbed_2gbit_t*`", "testbed_2gbit_compression_none_r1.json")
    assert not cites("`rabenseifner/`", "rabenseifner_by_hand.json")


def test_every_result_file_is_cited_and_results_md_is_small():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the tracked files are unknown")
    assert rc.uncited(ROOT) == [], "remove them: python3 tools/results_cited.py --remove"
    assert (ROOT / "benchmarks" / "RESULTS.md").stat().st_size <= 25_000
