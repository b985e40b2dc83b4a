"""init / finalize life cycle: calls before init and after finalize raise
MLCommError, init -> finalize -> init works, and a script that never calls
init_mpi works. This module manages init itself (no `session` fixture); every test
leaves ml_comm finalized."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import (
    CHUNK_BYTES,
    DTYPES,
    Checks,
    comm_world,
    expected_average,
    make_input,
    suite_comm,
)

import ml_comm as mc

pytestmark = pytest.mark.mpi

STATE_WORDS = ["init"]


def finalize_quietly():
    try:
        mc.finalize()
    except mc.MLCommError:
        pass


def check_not_initialised(c: Checks, tag):
    x = make_input(c.rank, (4,), np.float32)
    c.raises(mc.StateError, mc.gradients, [x], words=STATE_WORDS)
    c.raises(mc.StateError, mc.gradients, [x], team=0, words=STATE_WORDS)
    c.raises(mc.StateError, mc.average, x.copy(), words=STATE_WORDS)
    c.raises(mc.StateError, mc.broadcast, [x.copy()], words=STATE_WORDS)
    c.raises(mc.StateError, mc.broadcast, [x.copy()], root=0, words=STATE_WORDS)
    c.raises(mc.StateError, mc.check_buffers_match, [x], words=STATE_WORDS)
    c.raises(mc.StateError, mc.config_team, 0, mc.ALG_AUTO, 10, 10, words=STATE_WORDS)
    c.equal(x, make_input(c.rank, (4,), np.float32), f"{tag}: input modified")


def check_working(c: Checks, nteams, tag):
    """Exact gradients on every team, average, broadcast, buffers match."""
    rank, n = mc.get_rank(), mc.get_nranks()
    for team in range(nteams):
        specs = [((129,), DTYPES[team % 6], team), ((3,), DTYPES[(team + 3) % 6], team + 50)]
        out = mc.gradients([make_input(rank, s, dt, seed) for s, dt, seed in specs], team=team)
        for k, ((s, dt, seed), o) in enumerate(zip(specs, out)):
            c.equal(o, expected_average(s, dt, n, seed), f"{tag}: team {team} gradient {k}")
    a = make_input(rank, (33,), np.int32, 9)
    mc.average(a)
    c.equal(a, expected_average((33,), np.int32, n, 9), f"{tag}: average")
    b = [make_input(rank, (8,), np.float16, 10)]
    mc.broadcast(b, root=n - 1)
    c.equal(b[0], make_input(n - 1, (8,), np.float16, 10), f"{tag}: broadcast")
    c.true(mc.check_buffers_match(b) == 0, f"{tag}: buffers do not match after broadcast")
    mc.barrier()


def test_init_mpi_idempotent_and_rank_size():
    c = Checks()
    mc.init_mpi()
    mc.init_mpi()
    comm = comm_world()
    c.true(mc.get_rank() == comm.rank, f"get_rank() {mc.get_rank()} != {comm.rank}")
    c.true(mc.get_nranks() == comm.size, f"get_nranks() {mc.get_nranks()} != {comm.size}")
    from mpi4py import MPI

    c.true(
        MPI.Query_thread() == MPI.THREAD_MULTIPLE,
        f"MPI thread level {MPI.Query_thread()}, want MPI_THREAD_MULTIPLE",
    )
    c.finish()


def test_calls_before_init_raise():
    c = Checks()
    check_not_initialised(c, "before init")
    c.finish()


def test_init_finalize_init_again():
    c = Checks()
    configs = [
        dict(nthread_per_team=1, nteams=1, msglen=64, chunk_bytes=CHUNK_BYTES),
        dict(nthread_per_team=2, nteams=3, msglen=1000, chunk_bytes=512),
        dict(nthread_per_team=3, nteams=2, msglen=100, chunk_bytes=CHUNK_BYTES),
        dict(nthread_per_team=1, nteams=1, msglen=64, chunk_bytes=CHUNK_BYTES),
    ]
    try:
        for i, cfg in enumerate(configs):
            nteams = cfg["nteams"]
            mc.init(
                cfg["nthread_per_team"],
                nteams,
                cfg["msglen"],
                chunk_bytes=cfg["chunk_bytes"],
                comm=suite_comm(),
            )
            check_working(c, nteams, f"cycle {i}")
            c.raises(ValueError, mc.gradients, [np.zeros(2, np.float32)], team=nteams)
            mc.finalize()
            check_not_initialised(c, f"after finalize {i}")
    finally:
        finalize_quietly()
    c.finish()


def test_init_twice_raises_and_session_survives():
    c = Checks()
    try:
        mc.init(1, 2, 256, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
        c.raises(mc.StateError, mc.init, 1, 2, 256, chunk_bytes=CHUNK_BYTES)
        c.raises(mc.StateError, mc.init, 2, 1, 64)
        check_working(c, 2, "after init twice")
    finally:
        finalize_quietly()
    check_not_initialised(c, "after finalize")
    c.finish()


@pytest.mark.parametrize("framework", [None, "numpy"])
def test_framework_numpy(framework):
    c = Checks()
    try:
        mc.init(1, 1, 512, framework, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
        check_working(c, 1, f"framework={framework!r}")
    finally:
        finalize_quietly()
    c.finish()


def test_default_chunk_bytes_and_positional_args():
    """Default 1 MiB segments: a 1.2 MB array is 2 segments, 300x msglen."""
    c = Checks()
    try:
        mc.init(2, 1, 1000, comm=suite_comm())
        rank, n = mc.get_rank(), mc.get_nranks()
        out = mc.gradients([make_input(rank, (300_001,), np.float32, 4)])
        c.equal(out[0], expected_average((300_001,), np.float32, n, 4), "default chunk")
        check_working(c, 1, "default chunk")
    finally:
        finalize_quietly()
    c.finish()


@pytest.mark.parametrize("kind", ["split", "dup", "self"])
def test_init_on_a_sub_communicator(kind):
    """init(comm=...): rank, size and every operation are the communicator's. With a
    split by rank parity each half averages among itself only, at the same time as
    the other half."""
    from mpi4py import MPI

    c = Checks()
    world = comm_world()
    if kind == "split":
        comm = world.Split(color=world.rank % 2, key=world.rank)
    elif kind == "dup":
        comm = world.Dup()
    else:
        comm = MPI.COMM_SELF
    try:
        mc.init(2, 2, 256, chunk_bytes=CHUNK_BYTES, comm=comm)
        c.true(
            (mc.get_rank(), mc.get_nranks()) == (comm.rank, comm.size),
            f"{kind}: get_rank/get_nranks {(mc.get_rank(), mc.get_nranks())}, "
            f"want {(comm.rank, comm.size)}",
        )
        check_working(c, 2, kind)
        # The halves differ in their data: each half's result is its own average.
        seed = 3 + (world.rank % 2 if kind == "split" else 0)
        x = make_input(comm.rank, (1001,), np.float64, seed)
        out = mc.gradients([x])[0]
        want = expected_average((1001,), np.float64, comm.size, seed)
        c.equal(out, want, f"{kind}: gradients over the communicator's ranks only")
    finally:
        finalize_quietly()
        if kind != "self":
            comm.Free()
    c.finish()


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_finalize_frees_the_teams_when_the_summary_fails():
    """The closing report prints; if that raises (stdout closed), finalize still stops
    the teams' threads and frees their communicators, then raises."""
    c = Checks()
    before = _os_threads()
    mc.init(3, 2, 256, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
    mc.config_team(1, mc.ALG_AUTO, 10, 10, verbosity=2, perf_freq=1000)
    c.true(_os_threads() >= before + 6, f"threads {before} -> {_os_threads()}: teams not seen")
    mc.gradients([make_input(mc.get_rank(), (8,), np.float32)], team=1)
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 - closed below
    sys.stdout.close()
    try:
        c.raises(ValueError, mc.finalize, words=("closed file",))
    finally:
        sys.stdout = stdout
    c.true(_os_threads() == before, f"threads {before} before init, {_os_threads()} after")
    check_not_initialised(c, "after a failed summary")
    c.finish()


# --- a script that never calls init_mpi --------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import ml_comm as mc

    mc.init(1, 1, 64, chunk_bytes=256)          # no init_mpi(): init starts MPI
    rank, n = mc.get_rank(), mc.get_nranks()
    x = np.arange(1001, dtype=np.float32) * np.float32(rank + 1)
    out = mc.gradients([x])[0]
    stack = np.stack([np.arange(1001, dtype=np.float32) * np.float32(r + 1) for r in range(n)])
    want = np.sum(stack, axis=0, dtype=np.float32) / np.float32(n)
    assert out.tobytes() == want.tobytes(), (out[:5], want[:5])
    from mpi4py import MPI
    assert MPI.Is_initialized()
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE, MPI.Query_thread()
    assert n == MPI.COMM_WORLD.size and rank == MPI.COMM_WORLD.rank
    mc.finalize()
    print(f"script ok rank={rank} nranks={n}", flush=True)
    """
)

# Variables through which the enclosing mpiexec (Hydra / PMI) would make the child
# think it is one of our ranks; without them the child starts as a singleton. Intel
# MPI's mpiexec also hands its ranks the job's identity and pinning (I_MPI_HYDRA_UUID,
# I_MPI_PIN_MAPPING, I_MPI_INFO_*), which describe the enclosing job, not the child.
_LAUNCHER_PREFIXES = (
    "PMI_",
    "PMIX_",
    "HYDRA_",
    "HYDI_",
    "MPI_LOCAL",
    "OMPI_",
    "PALS_",
    "SLURM_",
    "I_MPI_",
)


# Settings of the user, not of the enclosing launcher: Open MPI's consent to run as root.
_KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


def _clean_env():
    env = {
        k: v for k, v in os.environ.items() if k in _KEEP or not k.startswith(_LAUNCHER_PREFIXES)
    }
    # A child that dies of a signal then prints where, instead of nothing.
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def _run_on_rank0_others_wait(fn):
    """fn() runs on rank 0 only (it launches processes: no collective inside); the
    other ranks sleep in a non-blocking barrier instead of spinning on the CPU the
    child needs; then rank 0's result is shared with every rank."""
    comm = comm_world()
    result = fn() if comm.rank == 0 else None
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.02)
    return comm.bcast(result, root=0)


def _launch(cmd, timeout=120):
    try:
        p = subprocess.run(
            cmd,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return "timeout", str(e.stdout), str(e.stderr)


def test_script_without_init_mpi_singleton():
    c = Checks()
    rc, out, err = _run_on_rank0_others_wait(lambda: _launch([sys.executable, "-c", SCRIPT]))
    c.true(
        rc == 0 and "script ok rank=0 nranks=1" in out,
        f"singleton script: rc={rc}\nstdout: {out[-2000:]}\nstderr: {err[-4000:]}",
    )
    c.finish()


def test_script_without_init_mpi_two_ranks():
    c = Checks()
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():  # same answer on every rank: no collective skipped
        pytest.skip(f"{mpiexec} not found")
    rc, out, err = _run_on_rank0_others_wait(
        lambda: _launch([str(mpiexec), "-n", "2", sys.executable, "-c", SCRIPT])
    )
    c.true(
        rc == 0 and "script ok rank=0 nranks=2" in out and "script ok rank=1 nranks=2" in out,
        f"mpiexec -n 2 script: rc={rc}\nstdout: {out[-2000:]}\nstderr: {err[-4000:]}",
    )
    c.finish()
