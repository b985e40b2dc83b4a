"""`python -m ml_comm --check`: what a job sees, as one report from rank 0.

Run it the way the training runs (`mpiexec -n N`, `srun ...`): every rank collects
its own line (host, pid, MPI library, the launcher's task count), rank 0 prints the
report, then a test reduction through ml_comm shows the result and its time. The
exit status is 1 when something is wrong (two MPI libraries, a mis-launch, a wrong
result), so a job script can run it first.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from importlib import metadata

import numpy as np

from .. import _core
from ..core import compression, settings
from ..core.spans import spans
from ..core.version import VERSION
from . import launch
from . import library as mpi_library

TEST_ELEMENTS = 1 << 20
# Variables that name the transport an MPI picked, in the order they are worth showing.
TRANSPORT_VARIABLES = (
    "MPIR_CVAR_CH4_NETMOD",
    "FI_PROVIDER",
    "UCX_TLS",
    "UCX_NET_DEVICES",
    "I_MPI_FABRICS",
    "I_MPI_OFI_PROVIDER",
    "OMPI_MCA_pml",
    "OMPI_MCA_btl",
    "OMPI_MCA_mtl",
)


def transport(version: str, env: dict[str, str]) -> str:
    """The transport as far as the library's version string and the environment tell."""
    said = []
    device = re.search(r"MPICH Device:\s*(.+)", version)
    if device:
        said.append(f"device {device.group(1).strip()}")
    said += [f"{k}={env[k]}" for k in TRANSPORT_VARIABLES if env.get(k)]
    return ", ".join(said) if said else "not told by the library or the environment"


def bundled_wheel(path: str) -> bool:
    """True when `path` is the libmpi of the `mpich` wheel."""
    try:
        dist = metadata.distribution("mpich")
    except metadata.PackageNotFoundError:
        return False
    for f in dist.files or []:
        if f.name.startswith("libmpi") and path:
            try:
                if os.path.samefile(dist.locate_file(f), path):
                    return True
            except OSError:
                continue
    return False


def rank_facts(MPI) -> dict:
    core, theirs = mpi_library.core_library(), mpi_library.mpi4py_library(MPI)
    return {
        "rank": MPI.COMM_WORLD.Get_rank(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "core": core,
        "mpi4py": theirs,
        "same": mpi_library.same_library(core, theirs),
        "not chosen": mpi_library.not_chosen_message(core, _core.__file__),
        "tasks": launch.launcher_tasks(),
        "network": launch.network_variables(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "settings": {k: v for k, v in os.environ.items() if k.startswith(settings.PREFIX)},
        "bad value": _bad_value(),
    }


def _bad_value() -> str:
    """The message of the first ML_COMM_* variable whose value init would refuse, or ""."""
    try:
        settings.check_all()
        compression.from_env()
    except ValueError as exc:
        return str(exc)
    return ""


def settings_lines(facts: list[dict]) -> tuple[list[str], list[str]]:
    """(report lines, problems): every ML_COMM_* variable of rank 0's environment, as
    init reads it; names that are no setting, values init refuses, other ranks' others."""
    env = facts[0]["settings"]
    unknown = settings.unknown(env)
    lines, problems = [], []
    for name in sorted(env):
        if name in unknown:
            close = unknown[name]
            hint = f"did you mean {close}?" if close else "no setting is close"
            lines.append(f"setting        {name}={env[name]}  NOT A SETTING ({hint})")
            problems.append(f"{name} is not a setting of ml_comm and does nothing ({hint})")
        elif name in settings.BY_NAME:
            lines.append(f"setting        {name}={env[name]}")
        else:
            lines.append(f"setting        {name}={env[name]}  (the test suite's)")
    known = sum(1 for name in env if name in settings.BY_NAME)
    lines.append(
        f"settings       {known} of {len(settings.SETTINGS)} set; the others at their defaults "
        "(docs: Environment variables)"
    )
    for f in facts:
        if f["bad value"]:
            problems.append(f"rank {f['rank']}: {f['bad value']}")
    differ = [str(f["rank"]) for f in facts if f["settings"] != env]
    if differ:
        ranks = f"rank{'s' if len(differ) > 1 else ''} {', '.join(differ)}"
        problems.append(f"{ranks}: other ML_COMM_* variables than rank 0's")
    return lines, problems


def core_lines(facts: list[dict]) -> list[str]:
    """Per host, the cores its ranks may run on; a note where ranks' threads must share.

    ml_comm's communication threads run beside the framework's: a rank bound to one
    core, or ranks of one host with fewer than two cores each, leave the threads none
    of their own, and every reduction waits on the scheduler (docs/launch.md). A
    note, not a problem: a laptop's ranks share their cores and still train right.
    """
    hosts: dict[str, list[dict]] = {}
    for f in facts:
        hosts.setdefault(f["host"], []).append(f)
    lines = []
    for host, ranks in hosts.items():
        cores = sorted({c for f in ranks for c in f["cpus"]})
        names = ",".join(str(f["rank"]) for f in ranks)
        per_rank = " or ".join(str(n) for n in sorted({len(f["cpus"]) for f in ranks}))
        plural = "s" if len(ranks) > 1 else ""
        lines.append(
            f"cores          {host}: rank{plural} {names} on cpus {spans(cores, ',')} "
            f"({len(cores)} core{'s' if len(cores) > 1 else ''}; each rank may use {per_rank})"
        )
        single = [str(f["rank"]) for f in ranks if len(f["cpus"]) == 1]
        if single:
            lines.append(
                f"note           rank{'s' if len(single) > 1 else ''} {','.join(single)} on "
                f"{host} may run on one core only: ml_comm's communication threads and the "
                "framework's will take turns on it (give each task cores: srun "
                "--cpus-per-task, --cpu-bind; docs/launch.md)"
            )
        elif len(cores) < 2 * len(ranks):
            lines.append(
                f"note           {host}'s ranks share {len(cores)} cores, fewer than two "
                "per rank: give TensorFlow 2 inter-op threads and as many intra-op threads as "
                "each rank's cores minus ml_comm's threads (at least 1), or its pools take "
                "the communication threads' CPU (docs/launch.md)"
            )
    return lines


def test_reduction(mc, rank: int, size: int) -> tuple[bool, float, str]:
    """Average (rank + 1) * i over the ranks: exactly (size + 1) / 2 * i, float32; and
    why init refused to start (settings that differ between the ranks, which it compares
    on every rank alike), else "". Variables that are no setting leave the environment
    first: they do nothing, and the report lists them (init would warn about them too,
    or refuse them)."""
    for name in settings.unknown():
        del os.environ[name]
    try:
        mc.init(1, 1, TEST_ELEMENTS)
    except mc.MLCommError as exc:
        return False, 0.0, f"init refused to start: {exc}"
    try:
        x = (rank + 1) * np.arange(TEST_ELEMENTS, dtype=np.float32)
        mc.barrier()
        start = time.perf_counter()
        out = mc.average(x)
        seconds = time.perf_counter() - start
        expected = np.arange(TEST_ELEMENTS, dtype=np.float32) * np.float32((size + 1) / 2)
        return bool(np.array_equal(out, expected)), seconds, ""
    finally:
        mc.finalize()


def report(facts: list[dict], size: int, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(report lines, problems) from every rank's facts."""
    me = facts[0]
    core = me["core"]
    lines = [
        f"ml_comm check: {size} MPI rank{'s' if size != 1 else ''}",
        f"MPI library    {core.describe()}",
        f"mpi4py's       {me['mpi4py'].describe()}, found by {mpi_library.how_mpi4py_found_it()}",
        f"transport      {transport(core.version, env)}",
    ]
    problems = []
    for f in facts:
        if not f["same"]:
            problems.append(
                f"rank {f['rank']}: two MPI libraries: core {f['core'].describe()}, "
                f"mpi4py {f['mpi4py'].describe()}"
            )
        elif f["core"].path != core.path or f["core"].normalised != core.normalised:
            problems.append(f"rank {f['rank']} uses another MPI: {f['core'].describe()}")
        if f["not chosen"]:
            problems.append(f"rank {f['rank']}: not the MPI chosen: {f['not chosen']}")
    tasks = me["tasks"]
    if tasks:
        said = ", ".join(f"{name}={count}" for name, count, _ in tasks)
        counts = {count for name, count, _ in tasks if name != "MPI_LOCALNRANKS"}
        verdict = "match" if counts <= {size} else "DO NOT MATCH"
        lines.append(f"launcher       {said}; MPI size {size}: {verdict}")
        if launch.mislaunched(size):
            problems.append(launch.mislaunch_message(tasks, size, core.describe()))
        elif verdict != "match":
            problems.append(f"the launcher's task counts ({said}) differ from MPI's size {size}")
    else:
        lines.append(f"launcher       no task count in the environment; MPI size {size}")
    network = me["network"]
    lines.append("network vars   " + (" ".join(f"{k}={v}" for k, v in network.items()) or "none"))
    if any(f["network"] != network for f in facts):
        differ = [str(f["rank"]) for f in facts if f["network"] != network]
        ranks = f"rank{'s' if len(differ) > 1 else ''} {', '.join(differ)}"
        problems.append(f"{ranks}: other network variables than rank 0's")
    if bundled_wheel(core.path) and ("SLURM_JOB_ID" in env or "SLURM_STEP_ID" in env):
        lines.append(
            "note           this is the MPICH wheel bundled for machines without an MPI "
            "(shared memory and TCP; no site fabric provider such as Slingshot's cxi); under "
            "Slurm on a cluster use the site's MPI: docs/install.md, 'Which MPI'"
        )
    lines += core_lines(facts)
    said, wrong = settings_lines(facts)
    lines += said
    problems += wrong
    for f in facts:
        lines.append(
            f"rank {f['rank']:<9} {f['host']} pid {f['pid']} {f['core'].path or '(path unknown)'}"
        )
    return lines, problems


def run(mc) -> int:
    """The report, rank 0 printing it; `mc` is the public API (init, average, ...), which
    the command line hands down (it sits above this layer)."""
    MPI = mc.init_mpi()
    launch.quiet_alone()  # the report gives the rank count
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = rank_facts(MPI)
    facts = comm.gather(mine, root=0)
    ok_here = mine["same"] and not launch.mislaunched(size) and not mine["bad value"]
    can_reduce = comm.allreduce(ok_here, op=MPI.LAND)
    exact, seconds, refused = test_reduction(mc, rank, size) if can_reduce else (False, 0.0, "")
    exact = comm.allreduce(exact, op=MPI.LAND)
    seconds = comm.allreduce(seconds, op=MPI.MAX)
    if rank != 0:
        return comm.bcast(None, root=0)
    lines, problems = report(facts, size, dict(os.environ))
    lines.insert(
        1,
        f"ml_comm        {VERSION}, python {sys.version.split()[0]}, numpy "
        f"{np.__version__}, mpi4py {_mpi4py_version()}",
    )
    if refused:
        lines.append("test reduction not run (see the problems below)")
        problems.append(refused)
    elif can_reduce:
        mb = TEST_ELEMENTS * 4 / 1e6
        state = "exact" if exact else "WRONG"
        lines.append(
            f"test reduction average of {TEST_ELEMENTS} float32 ({mb:.1f} MB) over {size} "
            f"rank{'s' if size != 1 else ''}: {state}, {seconds * 1e3:.2f} ms"
        )
        if not exact:
            problems.append("the test reduction gave a wrong result")
    else:
        lines.append("test reduction not run (see the problems below)")
    print("\n".join(lines))
    for p in problems:
        print(f"PROBLEM: {p}")
    sys.stdout.flush()
    return comm.bcast(1 if problems else 0, root=0)


def _mpi4py_version() -> str:
    import mpi4py

    return mpi4py.__version__
