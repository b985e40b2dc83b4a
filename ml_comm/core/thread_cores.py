"""ML_COMM_THREAD_CORES at init: the cores this rank's team threads run on.

The list is node-local (each rank takes its own local rank's list, or the only one) and
not compared across ranks, but it is checked on every rank together: a list that names
cores this rank may not run on (outside os.sched_getaffinity of the thread calling init,
which the team threads would otherwise inherit) fails init on every rank alike, naming
each rank's problem, instead of one rank failing while the others wait for it. A list
that does not parse fails earlier, in settings.check_all, on every rank that has it.

The core pins each team thread to the whole list (csrc/team/thread_cores.c). Unset on a
rank: its threads keep the affinity they inherit, as before the setting existed.
"""

from __future__ import annotations

import os

from .._core import ffi, lib
from . import settings
from .cpu_list import for_local_rank
from .errors import SettingsError
from .job_errors import raised_by_all
from .spans import spans
from .status import check

VARIABLE = "ML_COMM_THREAD_CORES"


def local_rank(comm, mpi) -> int:
    """This rank's rank among the ranks of comm that share its node's memory. Collective."""
    node = comm.Split_type(mpi.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return node.Get_rank()
    finally:
        node.Free()


def written(lists: tuple[tuple[int, ...], ...]) -> str:
    """The setting as a CPU list again ("6-7:14-15"), for messages."""
    return ":".join(spans(cores, ",") for cores in lists)


def problem(lists, node_rank: int, allowed: set[int]) -> str | None:
    """What is wrong with this rank's list, in words; None when nothing is."""
    try:
        cores = for_local_rank(lists, node_rank)
    except ValueError as exc:
        return str(exc)
    outside = sorted(set(cores) - allowed)
    if not outside:
        return None
    whose = f" (local rank {node_rank}'s list)" if len(lists) > 1 else ""
    if len(outside) > 1:
        named = f"cores {spans(outside, ',')}{whose} are"
    else:
        named = f"core {outside[0]}{whose} is"
    return f"{named} outside the cores the rank may run on: {spans(sorted(allowed), ',')}"


def choose(comm, mpi) -> tuple[int, ...] | None:
    """This rank's cores (None: unset here, keep the inherited affinity). Collective over
    comm, whatever each rank's value: SettingsError on every rank when any rank's list
    names cores it may not run on, or has no list for its local rank."""
    lists = settings.get(VARIABLE)
    node_rank = local_rank(comm, mpi)
    mine = None if lists is None else problem(lists, node_rank, os.sched_getaffinity(0))
    ours = (mine, None if lists is None else written(lists))
    everyone = comm.allgather(ours) if comm.Get_size() > 1 else [ours]
    held: dict[tuple[str, str], list[int]] = {}
    for rank, (said, value) in enumerate(everyone):
        if said is not None:
            held.setdefault((said, value), []).append(rank)
    if held:
        lines = "; ".join(
            f"rank{'s' if len(ranks) > 1 else ''} {spans(ranks)} ({VARIABLE}={value!r}): {said}"
            for (said, value), ranks in held.items()
        )
        raise raised_by_all(
            SettingsError(
                f"init failed: {VARIABLE} names cores the ranks cannot run their "
                f"communication threads on: {lines}. Give each local rank cores of its own "
                "allowed set (taskset -cp <pid> shows it; srun --cpu-bind and mpiexec "
                f"--bind-to narrow it), or unset {VARIABLE}"
            ),
            comm,
        )
    return None if lists is None else for_local_rank(lists, node_rank)


def apply(team, cores: tuple[int, ...] | None) -> None:
    """Pin every thread of `team` to `cores` (None: leave them as they are)."""
    if cores is None:
        return
    check(lib.mlc_team_set_thread_cores(team, ffi.new("int[]", list(cores)), len(cores)), VARIABLE)
