"""Linux CPU lists ("6-7", "0,2,4-5"), as taskset -c, cpusets and Slurm write them, and
ML_COMM_THREAD_CORES's form: one list for every rank of a node, or one per local rank
separated by ":" ("6-7:14-15": local rank 0 gets 6-7, local rank 1 gets 14-15).

Pure functions, no import of the core: the settings table parses with them, and they are
tested without MPI (tests/unit/test_cpu_list.py).
"""

from __future__ import annotations

import re

# One item of a list: a core, or a range first-last (taskset's "0-6:2" strides are
# not taken: nobody writes them for a thread or two).
_ITEM = re.compile(r"(\d+)(?:-(\d+))?")
# Past any machine's core count; refuses a typo such as "1-100000000" before it
# allocates a set that large.
MAX_CPU = 1 << 16


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """ "0,2,4-5" -> (0, 2, 4, 5): the cores, sorted, each once. ValueError saying what is
    wrong for an empty list, an item that is no core or range, or a range that runs
    backwards."""
    cores: set[int] = set()
    items = text.strip().split(",")
    for item in items:
        item = item.strip()
        found = _ITEM.fullmatch(item)
        if not found:
            what = "an empty item" if not item else f"{item!r} is neither a core nor a range"
            raise ValueError(f"{what} in the CPU list {text!r}")
        first = int(found.group(1))
        last = first if found.group(2) is None else int(found.group(2))
        if last < first:
            raise ValueError(f"the range {item!r} runs backwards in the CPU list {text!r}")
        if last >= MAX_CPU:
            raise ValueError(f"core {last} is past {MAX_CPU - 1} in the CPU list {text!r}")
        cores.update(range(first, last + 1))
    return tuple(sorted(cores))


def parse_per_local_rank(text: str) -> tuple[tuple[int, ...], ...]:
    """ "6-7:14-15" -> ((6, 7), (14, 15)): one CPU list per local rank; a single list
    ("6-7") is one tuple, which every local rank takes. ValueError as parse_cpu_list."""
    return tuple(parse_cpu_list(part) for part in text.split(":"))


def for_local_rank(lists: tuple[tuple[int, ...], ...], local_rank: int) -> tuple[int, ...]:
    """The list of `local_rank`: the only one, or its own. ValueError when there are
    several and none is its own (more ranks on the node than lists)."""
    if len(lists) == 1:
        return lists[0]
    if local_rank < len(lists):
        return lists[local_rank]
    raise ValueError(
        f"{len(lists)} CPU lists separated by ':' name cores for local ranks "
        f"0-{len(lists) - 1}, but this node runs local rank {local_rank}"
    )
