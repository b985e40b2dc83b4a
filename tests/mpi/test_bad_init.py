"""Bad input to the life cycle, as a table: init arguments and settings in the
environment that are wrong, calls before init and after finalize. Each raises the
documented exception with a message that says what to do, on every rank, before any
communication; afterwards a valid init works. This module manages init itself (no
`session` fixture) and leaves ml_comm finalized."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import CHUNK_BYTES, Checks, comm_world, expected_average, make_input, suite_comm

import ml_comm as mc
from ml_comm.core.settings import SettingsError

pytestmark = pytest.mark.mpi

# The classes of arguments that are wrong on this rank: also TypeError and ValueError.
BAD_TYPE = mc.BadArgumentTypeError
BAD_VALUE = mc.BadArgumentError

NOT_INITIALISED = (
    r"^ml_comm is not initialised: call ml_comm\.init\(nthread_per_team, nteams, msglen\) "
    r"first \(it is also needed again after finalize\(\)\)$"
)
FRAMEWORKS = r"\(None, 'numpy', 'tensorflow', 'jax'\)"


@dataclass(frozen=True)
class InitCase:
    id: str
    args: tuple
    exc: type
    pattern: str
    kwargs: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)


# fmt: off
INIT_CASES = [
    InitCase("nthread_per_team=0", (0, 1, 64), BAD_VALUE,
             r"^nthread_per_team must be between 1 and 256, got 0$"),
    InitCase("nthread_per_team=-1", (-1, 1, 64), BAD_VALUE,
             r"^nthread_per_team must be between 1 and 256, got -1$"),
    InitCase("nthread_per_team=257", (257, 1, 64), BAD_VALUE,
             r"^nthread_per_team must be between 1 and 256, got 257$"),
    InitCase("nthread_per_team='2'", ("2", 1, 64), BAD_TYPE,
             r"^nthread_per_team must be an int, got str$"),
    InitCase("nthread_per_team=2.0", (2.0, 1, 64), BAD_TYPE,
             r"^nthread_per_team must be an int, got float$"),
    InitCase("nthread_per_team=True", (True, 1, 64), BAD_TYPE,
             r"^nthread_per_team must be an int, got bool$"),
    InitCase("nteams=0", (1, 0, 64), BAD_VALUE, r"^nteams must be between 1 and 64, got 0$"),
    InitCase("nteams=65", (1, 65, 64), BAD_VALUE, r"^nteams must be between 1 and 64, got 65$"),
    InitCase("nteams=None", (1, None, 64), BAD_TYPE, r"^nteams must be an int, got NoneType$"),
    InitCase("msglen=0", (1, 1, 0), BAD_VALUE,
             r"^msglen must be between 1 and 1099511627776, got 0$"),
    InitCase("msglen=-3", (1, 1, -3), BAD_VALUE,
             r"^msglen must be between 1 and 1099511627776, got -3$"),
    InitCase("msglen=2**41", (1, 1, 2**41), BAD_VALUE,
             rf"^msglen must be between 1 and 1099511627776, got {2**41}$"),
    InitCase("msglen=1.5e6", (1, 1, 1.5e6), BAD_TYPE, r"^msglen must be an int, got float$"),
    InitCase("framework='pytorch'", (1, 1, 64, "pytorch"), BAD_VALUE,
             rf"^framework must be one of {FRAMEWORKS}, got 'pytorch'$"),
    InitCase("framework='TensorFlow'", (1, 1, 64, "TensorFlow"), BAD_VALUE,
             rf"^framework must be one of {FRAMEWORKS}, got 'TensorFlow'$"),
    InitCase("framework=1", (1, 1, 64, 1), BAD_VALUE,
             rf"^framework must be one of {FRAMEWORKS}, got 1$"),
    InitCase("chunk_bytes=0", (1, 1, 64), BAD_VALUE, r"^chunk_bytes must be at least 1, got 0$",
             kwargs={"chunk_bytes": 0}),
    InitCase("chunk_bytes=4", (1, 1, 64), BAD_VALUE, r"^chunk_bytes must be at least 8, got 4$",
             kwargs={"chunk_bytes": 4}),
    InitCase("chunk_bytes='1M'", (1, 1, 64), BAD_TYPE, r"^chunk_bytes must be an int, got str$",
             kwargs={"chunk_bytes": "1M"}),
    InitCase("ML_COMM_CHUNK_BYTES=abc", (1, 1, 64), SettingsError,
             r"^environment variable ML_COMM_CHUNK_BYTES must be an integer, got 'abc'$",
             env={"ML_COMM_CHUNK_BYTES": "abc"}),
    InitCase("ML_COMM_CHUNK_BYTES=0", (1, 1, 64), BAD_VALUE,
             r"^chunk_bytes must be at least 1, got 0$", env={"ML_COMM_CHUNK_BYTES": "0"}),
    InitCase("ML_COMM_LATENCY_BYTES=-1", (1, 1, 64), SettingsError,
             r"^environment variable ML_COMM_LATENCY_BYTES must be >= 0, got -1$",
             env={"ML_COMM_LATENCY_BYTES": "-1"}),
    InitCase("ML_COMM_RABENSEIFNER_BYTES=-1", (1, 1, 64), SettingsError,
             r"^environment variable ML_COMM_RABENSEIFNER_BYTES must be >= 0, got -1$",
             env={"ML_COMM_RABENSEIFNER_BYTES": "-1"}),
    InitCase("ML_COMM_INLINE_BYTES=1k", (1, 1, 64), SettingsError,
             r"^environment variable ML_COMM_INLINE_BYTES must be an integer, got '1k'$",
             env={"ML_COMM_INLINE_BYTES": "1k"}),
    InitCase("comm='world'", (1, 1, 64), BAD_TYPE,
             r"^comm must be an mpi4py communicator \(e\.g\. MPI\.COMM_WORLD\.Split\(\.\.\.\)\), "
             r"got str$", kwargs={"comm": "world"}),
    InitCase("comm=0", (1, 1, 64), BAD_TYPE, r"^comm must be an mpi4py communicator .* got int$",
             kwargs={"comm": 0}),
]
# fmt: on


def check_raises(c: Checks, tag: str, exc: type, pattern: str, fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type is checked below
        c.true(type(e) is exc, f"{tag}: raised {type(e).__name__}({e}), want {exc.__name__}")
        c.true(re.search(pattern, str(e)), f"{tag}: message {str(e)!r} !~ {pattern!r}")
        return
    c.true(False, f"{tag}: did not raise, want {exc.__name__}")


def finalize_quietly():
    try:
        mc.finalize()
    except mc.MLCommError:
        pass


def valid_cycle(c: Checks, tag: str) -> None:
    """init works after the error; exact gradients; finalize."""
    mc.init(1, 1, 64, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
    try:
        rank, n = mc.get_rank(), mc.get_nranks()
        out = mc.gradients([make_input(rank, (300,), np.float32, 7)])
        c.equal(out[0], expected_average((300,), np.float32, n, 7), f"{tag}: gradients")
    finally:
        mc.finalize()


@pytest.mark.parametrize("case", INIT_CASES, ids=[k.id for k in INIT_CASES])
def test_bad_init(case):
    c = Checks()
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    try:
        check_raises(c, case.id, case.exc, case.pattern, mc.init, *case.args, **case.kwargs)
    finally:
        finalize_quietly()  # in case it did not raise
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    valid_cycle(c, case.id)
    c.finish()


def _overcommit_always() -> bool:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(_overcommit_always(), reason="vm.overcommit_memory=1: the allocation succeeds")
def test_msglen_too_large_for_memory():
    """A msglen within the type's range whose fusion buffer (4 * msglen bytes per team)
    cannot be allocated: the message says to lower msglen."""
    c = Checks()
    try:
        check_raises(
            c,
            "msglen=2**40",
            mc.OutOfMemoryError,
            r"^could not create a team: out of memory allocating the team's buffers; "
            r"msglen=1099511627776 asks for a fusion buffer of 4096\.0 GiB per team: use a "
            r"smaller msglen \(larger gradient sets are streamed through the buffer\)$",
            mc.init,
            1,
            1,
            2**40,
        )
    finally:
        finalize_quietly()
    valid_cycle(c, "after msglen=2**40")
    c.finish()


CALLS: dict[str, Callable] = {
    "gradients": lambda: mc.gradients([np.ones(4, np.float32)]),
    "gradients(team=1)": lambda: mc.gradients([np.ones(4, np.float32)], team=1),
    "average": lambda: mc.average(np.ones(4, np.float32)),
    "allreduce_sum": lambda: mc.allreduce_sum(np.ones(4, np.int32)),
    "broadcast": lambda: mc.broadcast([np.ones(4, np.float32)]),
    "broadcast(root=0)": lambda: mc.broadcast([np.ones(4, np.float32)], root=0),
    "check_buffers_match": lambda: mc.check_buffers_match([np.ones(4, np.float32)]),
    "config_team": lambda: mc.config_team(0, mc.ALG_AUTO, 10, 10),
    "barrier": mc.barrier,
    "team_settings": mc.team_settings,
    "team_stats": mc.team_stats,
}


@pytest.mark.parametrize("when", ["before init", "after finalize"])
@pytest.mark.parametrize("name", list(CALLS))
def test_call_without_session(name, when):
    c = Checks()
    if when == "after finalize":
        mc.init(1, 2, 64, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
        mc.finalize()
    check_raises(c, f"{name} {when}", mc.StateError, NOT_INITIALISED, CALLS[name])
    c.finish()


def test_finalize_is_idempotent():
    """finalize twice (and once more at exit, atexit) is harmless; without a session
    it does nothing."""
    c = Checks()
    mc.finalize()
    mc.init(1, 1, 64, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
    mc.finalize()
    mc.finalize()
    check_raises(c, "after double finalize", mc.StateError, NOT_INITIALISED, CALLS["gradients"])
    valid_cycle(c, "after double finalize")
    c.finish()


def test_rank_and_size_work_without_session():
    """get_rank / get_nranks / version_info need MPI only, not init."""
    c = Checks()
    comm = comm_world()  # before init, rank and size are COMM_WORLD's
    c.true(mc.get_rank() == comm.rank and mc.get_nranks() == comm.size, "rank/size")
    c.true(mc.version_info()["nranks"] == comm.size, "version_info nranks")
    c.finish()


def test_comm_null_and_intercomm():
    """A rank outside the communicator (COMM_NULL from a Split) and an intercommunicator
    are refused before anything starts, saying why."""
    from mpi4py import MPI

    c = Checks()
    check_raises(
        c,
        "comm=COMM_NULL",
        BAD_VALUE,
        r"^comm is MPI\.COMM_NULL: this rank is in no communicator",
        mc.init,
        1,
        1,
        64,
        comm=MPI.COMM_NULL,
    )
    world = comm_world()
    if world.size > 1:  # an intercommunicator between the even and the odd ranks
        half = world.Split(color=world.rank % 2, key=world.rank)
        inter = half.Create_intercomm(0, world, 1 - world.rank % 2, tag=7)
        check_raises(
            c,
            "intercomm",
            BAD_VALUE,
            r"^comm is an intercommunicator; ml_comm needs an intra",
            mc.init,
            1,
            1,
            64,
            comm=inter,
        )
        inter.Free()
        half.Free()
    valid_cycle(c, "after a bad comm")
    c.finish()
