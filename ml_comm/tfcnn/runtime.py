"""The ps_ml_comm job of one process: its rank among the ranks, and ml_comm's teams.

MPI starts in benchmark_cnn.setup() (before the first session config, which needs
the local rank to pin a GPU); ml_comm's teams start when the graph first needs them,
because their fusion buffers are sized by the model's parameter count.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .. import api as mc
from . import teams


@dataclass(frozen=True)
class Job:
    rank: int
    nranks: int
    local_rank: int  # rank among the ranks on this node
    threads: int
    nteams: int
    verbosity: int
    perf_freq: int
    ksteps: int  # config_team's; ksteps >= max_steps: synchronous
    max_steps: int
    compression: str | None = None  # config_team's; None: ML_COMM_COMPRESSION's


_job: Job | None = None
_teams_started = False


def start(params) -> Job:
    """Start MPI and read this rank's place; idempotent (the first params win)."""
    global _job
    if _job is None:
        mpi = mc.init_mpi()
        world = mpi.COMM_WORLD
        node = world.Split_type(mpi.COMM_TYPE_SHARED)
        try:
            local_rank = node.Get_rank()
        finally:
            node.Free()
        _job = Job(
            rank=world.Get_rank(),
            nranks=world.Get_size(),
            local_rank=local_rank,
            threads=params.number_ml_comm_threads,
            nteams=params.ml_comm_teams,
            verbosity=params.ml_comm_verbosity,
            perf_freq=params.ml_comm_perf_freq,
            ksteps=0 if params.ml_comm_ksteps is None else params.ml_comm_ksteps,
            max_steps=0 if params.ml_comm_ksteps is None else _steps(params),
            compression=params.ml_comm_compression,
        )
    return _job


def _steps(params) -> int:
    """Training steps of the run: upstream's warm-up batches (None: its default) then
    the timed ones."""
    warmup = params.num_warmup_batches
    return (10 if warmup is None else warmup) + (params.num_batches or 100)


def job() -> Job:
    if _job is None:
        raise RuntimeError(
            "ps_ml_comm: the job has not started; call benchmark_cnn.setup(params) first"
        )
    return _job


def active() -> bool:
    return _job is not None


def ensure_teams(msglen: int) -> None:
    """Start ml_comm's teams once, each with a fusion buffer of msglen elements."""
    global _teams_started
    if _teams_started:
        return
    j = job()
    mc.init(j.threads, j.nteams, max(int(msglen), 1), "tensorflow")
    for team in range(j.nteams):
        mc.config_team(
            team,
            mc.ALG_AUTO,
            j.ksteps,
            j.max_steps,
            j.verbosity,
            j.perf_freq,
            compression=j.compression,
        )
    _teams_started = True


def average(grads: list) -> list:
    """The gradients averaged over the ranks, as graph tensors; one block per team."""
    j = job()
    sizes = [g.shape.num_elements() or 0 for g in grads]
    blocks = teams.split(sizes, j.nteams)
    ensure_teams(max(sum(sizes[i] for i in block) for block in blocks) if blocks else 1)
    out: list = [None] * len(grads)
    for team, block in enumerate(blocks):
        for i, g in zip(block, mc.gradients([grads[i] for i in block], team)):
            out[i] = g
    return out


def gather(value: float) -> np.ndarray:
    """Every rank's value, in rank order, on every rank."""
    j = job()
    values = np.zeros(j.nranks, dtype=np.float64)
    values[j.rank] = value
    return mc.allreduce_sum(values)


def say(line: str) -> None:
    """Print on rank 0 only."""
    if job().rank == 0:
        print(line, file=sys.stdout, flush=True)
