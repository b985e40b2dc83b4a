"""How ps_ml_comm spreads one step's gradients over several ml_comm teams."""

from __future__ import annotations

from collections.abc import Sequence


def split(sizes: Sequence[int], nteams: int) -> list[range]:
    """Cut indices 0..len(sizes)-1 into at most `nteams` contiguous, non-empty blocks of
    about equal total size (block k ends where the running total first reaches
    (k+1)/nteams of the whole). Contiguous blocks keep each team's gradients in the
    order backprop produces them, so every team can start on its first block early.
    """
    if nteams < 1:
        raise ValueError(f"nteams must be >= 1, got {nteams}")
    total = sum(sizes)
    blocks: list[range] = []
    start = 0
    running = 0
    for i, size in enumerate(sizes):
        running += size
        boundary = total * (len(blocks) + 1) / nteams
        if running >= boundary and len(blocks) < nteams - 1:
            blocks.append(range(start, i + 1))
            start = i + 1
    if start < len(sizes):
        blocks.append(range(start, len(sizes)))
    return blocks
