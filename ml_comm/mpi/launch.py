"""What the launcher says about the job, checked against what MPI sees, at `init`.

A job started as N tasks whose MPI reports one rank in each (srun without the
PMI the MPI speaks, another MPI's mpiexec) would train as N separate 1-rank jobs
with no error: each rank alone, every checkpoint rank 0's. `check_launch` stops
that on every task, with the cause and the fix; it also runs the one-MPI check
(library.py). ML_COMM_ALLOW_ONE_RANK=1 lets tasks that are meant to run alone
(a parameter sweep inside one srun) through.
"""

from __future__ import annotations

import os
import sys
import time

from ..core import settings
from ..core.errors import MLCommError
from ..core.output import say
from . import library as mpi_library

OPT_OUT = "ML_COMM_ALLOW_ONE_RANK"
# A mislaunched task says why before it raises, then waits this long: the first task to
# exit can end the step (srun --kill-on-bad-exit), and output still in the launcher's
# forwarding when it does is lost (a test run once got a lone "Traceback" line).
_FORWARD_GRACE_SECONDS = 0.3

# (variable, who sets it): a task count of the whole job, set by the launcher in
# every task's environment. Slurm's SLURM_NTASKS alone is the allocation's, set in a
# batch script too, so it counts only inside a step (SLURM_STEP_ID set).
TASK_COUNT_VARIABLES = (
    ("SLURM_STEP_NUM_TASKS", "srun"),
    ("PMI_SIZE", "a PMI launcher (Hydra's mpiexec, srun --mpi=pmi2)"),
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh"),
    ("MPI_LOCALNRANKS", "Hydra's mpiexec (tasks on this node)"),
)

_said_alone = False

# A task's rank in the job, as launchers tell it before MPI starts.
RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")

# Variables that choose or tune the network of the common MPIs and fabrics. Narrow on
# purpose: launchers also set variables of these families that only describe the task
# (Intel's I_MPI_INFO_*, I_MPI_PIN_*, Open MPI's OMPI_MCA_ess_*, MV2_COMM_WORLD_*).
NETWORK_PREFIXES = (
    "UCX_",
    "FI_",
    "PSM2_",
    "PSM3_",
    "MPIR_CVAR_",
    "MPICH_",
    "I_MPI_FABRICS",
    "I_MPI_OFI_",
    "I_MPI_SHM",
    "I_MPI_TCP",
    "OMPI_MCA_pml",
    "OMPI_MCA_btl",
    "OMPI_MCA_mtl",
    "OMPI_MCA_osc",
    "MV2_IBA_",
    "MV2_USE_",
    "SLURM_MPI_TYPE",
)


def launcher_tasks(env: dict[str, str] | None = None) -> list[tuple[str, int, str]]:
    """Every task count the environment declares: (variable, count, who sets it)."""
    env = os.environ if env is None else env
    found = []
    for name, who in TASK_COUNT_VARIABLES:
        value = env.get(name, "")
        if value.strip().isdigit():
            found.append((name, int(value), who))
    if "SLURM_STEP_NUM_TASKS" not in env and "SLURM_STEP_ID" in env:
        value = env.get("SLURM_NTASKS", "")
        if value.strip().isdigit():
            found.append(("SLURM_NTASKS", int(value), "srun"))
    return found


def launcher_rank(env: dict[str, str] | None = None) -> int:
    """This task's rank as its launcher set it (0 when no launcher did), without MPI."""
    env = os.environ if env is None else env
    names = RANK_VARIABLES + (("SLURM_PROCID",) if "SLURM_STEP_ID" in env else ())
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def network_variables(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(NETWORK_PREFIXES)}


def mislaunch_message(tasks: list[tuple[str, int, str]], mpi_size: int, library: str) -> str:
    said = ", ".join(f"{name}={count} ({who})" for name, count, who in tasks)
    most = max(count for _, count, _ in tasks)
    return (
        f"the launcher started this job as {most} tasks ({said}) but MPI sees {mpi_size} "
        f"rank: every task would train alone. The launcher and the MPI do not speak to each "
        f"other. Under Slurm use `srun --mpi=pmi2` (what the MPICH wheel speaks) or the PMI "
        f"your site's MPI documents (`srun --mpi=list` shows them; Cray MPICH: --mpi=cray_shasta, "
        f"Open MPI: --mpi=pmix); else launch with the mpiexec of the MPI that ml_comm loaded: "
        f"{library}. If each task is meant to run alone, set {OPT_OUT}=1"
    )


def mislaunched(mpi_size: int, env: dict[str, str] | None = None) -> list[tuple[str, int, str]]:
    """The launcher's task counts when they say more than one task but MPI has one rank."""
    tasks = launcher_tasks(env)
    if mpi_size != 1 or not any(count > 1 for _, count, _ in tasks):
        return []
    return tasks


def say_if_alone(MPI) -> None:
    """One line, once per process, when no launcher started this process and MPI has it
    as its only rank: it trains alone, which may be meant (a first try) or not."""
    global _said_alone
    if _said_alone or MPI.COMM_WORLD.Get_size() != 1 or launcher_tasks():
        return
    if any(os.environ.get(name) for name in RANK_VARIABLES):
        return
    _said_alone = True
    say(
        "ml_comm: 1 rank: no launcher started this process, so it trains alone; "
        "`mpiexec -n N python SCRIPT` (or srun) runs it on N ranks"
    )


def quiet_alone() -> None:
    """A caller that reports the rank count itself (--check) needs no such line."""
    global _said_alone
    _said_alone = True


def check_launch(MPI) -> None:
    """Called by `init` on every rank before anything is created: one MPI library in this
    process, and as many MPI ranks as the launcher started tasks."""
    library = mpi_library.check_one_library(MPI)
    if settings.get(OPT_OUT):
        return
    tasks = mislaunched(MPI.COMM_WORLD.Get_size())
    if tasks:
        message = mislaunch_message(tasks, 1, library.describe())
        sys.stderr.flush()
        try:  # one write: a task killed in the middle of a traceback still said it
            os.write(2, f"ml_comm: {message}\n".encode())
        except OSError:
            pass
        time.sleep(_FORWARD_GRACE_SECONDS)
        raise MLCommError(message)
