"""The check report's per-host core lines (check_report.core_lines), from ranks' facts."""

from __future__ import annotations

from ml_comm.core.spans import spans
from ml_comm.mpi.check_report import core_lines


def fact(rank: int, host: str, cpus) -> dict:
    return {"rank": rank, "host": host, "cpus": sorted(cpus)}


def test_spans_fold_runs_as_taskset_prints_them():
    assert spans([0, 1, 2, 5, 7, 8], ",") == "0-2,5,7-8"
    assert spans([3], ",") == "3"


def test_one_rank_per_node_with_its_cores_gets_no_note():
    lines = core_lines([fact(0, "n1", range(36)), fact(1, "n2", range(36))])
    assert lines == [
        "cores          n1: rank 0 on cpus 0-35 (36 cores; each rank may use 36)",
        "cores          n2: rank 1 on cpus 0-35 (36 cores; each rank may use 36)",
    ]


def test_a_rank_bound_to_one_core_is_named():
    lines = core_lines([fact(0, "n1", [0]), fact(1, "n1", range(1, 9))])
    assert (
        lines[0] == "cores          n1: ranks 0,1 on cpus 0-8 (9 cores; each rank may use 1 or 8)"
    )
    assert lines[1].startswith("note           rank 0 on n1 may run on one core only")
    assert len(lines) == 2


def test_ranks_with_fewer_than_two_cores_each_are_told_to_shrink_the_framework():
    lines = core_lines([fact(r, "laptop", [0, 1, 2]) for r in range(2)])
    assert lines[1].startswith(
        "note           laptop's ranks share 3 cores, fewer than two per rank"
    )
    assert core_lines([fact(r, "n", range(4)) for r in range(2)])[1:] == []
