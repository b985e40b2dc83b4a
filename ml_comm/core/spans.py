"""Sorted integers (ranks, CPUs) written as runs, the way Slurm and taskset print them."""

from __future__ import annotations

from collections.abc import Sequence


def spans(numbers: Sequence[int], sep: str = ", ") -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" (numbers sorted, at least one)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return sep.join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
