"""The Cray-compatible public API (docs/api.md).

Each function finds the current session (core/session.py: MPI communicator, context,
teams, settings) and hands on to the part that does the work: the framework
backend for gradients/broadcast (core/backend.py: NumPy or TensorFlow), the NumPy
modules (arrays/reductions.py, arrays/broadcasts.py) for the calls that take NumPy arrays
whatever the framework. Arguments are validated before anything is sent, so a
bad call raises on every rank that makes it and leaves the process usable.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from ._core import ffi, lib
from .arrays import broadcasts, collectives, reductions
from .core import backend, settings
from .core import compression as _compression
from .core.errors import BadArgumentError, BadArgumentTypeError, MLCommError, StateError
from .core.session import THRESHOLD_SETTERS, Session, TeamConfig
from .core.status import check
from .faults import abort, stop
from .faults.departure import open_exits
from .mpi import launch
from .mpi.init import init_mpi

ALG_AUTO = lib.MLC_ALG_AUTO
ALG_RING = lib.MLC_ALG_RING
ALG_RECURSIVE_DOUBLING = lib.MLC_ALG_RECURSIVE_DOUBLING
ALG_RABENSEIFNER = lib.MLC_ALG_RABENSEIFNER
ALGORITHMS = {
    ALG_AUTO: "auto",
    ALG_RING: "ring",
    ALG_RECURSIVE_DOUBLING: "recursive_doubling",
    ALG_RABENSEIFNER: "rabenseifner",
}
FRAMEWORKS = backend.FRAMEWORKS

_session: Session | None = None
_session_lock = threading.Lock()


def session() -> Session:
    """The session that `init` started, for the layers built on this API (the Keras hook,
    Horovod's front end): its communicator (`comm`), `rank`, `size`, teams and their
    settings (`configs`, `guard`), and its framework backend (`backend.name`). Raises
    StateError before `init` and after `finalize`."""
    if _session is None:
        raise StateError(
            "ml_comm is not initialised: call ml_comm.init(nthread_per_team, nteams, "
            "msglen) first (it is also needed again after finalize())"
        )
    return _session


def is_initialized() -> bool:
    """Whether `init` has run and `finalize` has not (on this rank)."""
    return _session is not None


def _positive_int(name: str, value, upper: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BadArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1 or (upper is not None and value > upper):
        bound = f"between 1 and {upper}" if upper is not None else "at least 1"
        raise BadArgumentError(f"{name} must be {bound}, got {value}")
    return int(value)


def _communicator(comm):
    """init's `comm`: an mpi4py intracommunicator this rank belongs to (default COMM_WORLD)."""
    mpi = init_mpi()
    if comm is None:
        return mpi.COMM_WORLD
    if not isinstance(comm, mpi.Comm):
        raise BadArgumentTypeError(
            f"comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD.Split(...)), "
            f"got {type(comm).__name__}"
        )
    if comm == mpi.COMM_NULL:
        raise BadArgumentError(
            "comm is MPI.COMM_NULL: this rank is in no communicator (a Split with "
            "color=MPI.UNDEFINED?); call init only on the ranks that are in one"
        )
    if comm.Is_inter():
        raise BadArgumentError("comm is an intercommunicator; ml_comm needs an intracommunicator")
    return comm


# ---------------------------------------------------------------- life cycle


def init(
    nthread_per_team: int,
    nteams: int,
    msglen: int,
    framework: str | None = None,
    *,
    chunk_bytes: int | None = None,
    comm=None,
    agreed: Mapping[str, str] | None = None,
) -> None:
    """Start MPI if needed and create `nteams` teams of `nthread_per_team` threads.

    Collective over `comm`: every rank passes the same values
    ([Calls and their rules](api.md#init)).

    Args:
        nthread_per_team: communication threads per team.
        nteams: teams, one per model that trains at once (a GAN: 2).
        msglen: element count (float32 elements, typically the model's parameter count)
            that sizes each team's fusion buffer; larger gradient sets are streamed
            through it.
        framework: None or "numpy" (NumPy arrays), or "tensorflow" (tensors and ops).
        chunk_bytes: pipelining segment size (default ML_COMM_CHUNK_BYTES or 1 MiB).
        comm (mpi4py.MPI.Intracomm): the communicator the job runs on (default
            COMM_WORLD); ranks, sizes and every operation then refer to it.
        agreed: for a layer above (the Keras hook): its own settings, name to value as
            text, that every rank must share; compared with ml_comm's own in init's one
            exchange, and MismatchError on every rank names those that differ.
    """
    global _session
    nthreads = _positive_int("nthread_per_team", nthread_per_team, 256)
    nteams = _positive_int("nteams", nteams, 64)
    msglen = _positive_int("msglen", msglen, 1 << 40)
    framework = backend.check_name(framework)
    settings.check_all()  # every ML_COMM_* variable parses, before anything starts
    if chunk_bytes is None:
        chunk_bytes = settings.get("ML_COMM_CHUNK_BYTES")
    chunk_bytes = _positive_int("chunk_bytes", chunk_bytes)
    if chunk_bytes < 8:
        raise BadArgumentError(f"chunk_bytes must be at least 8, got {chunk_bytes}")
    thresholds = {
        name: settings.get(name)
        for name in THRESHOLD_SETTERS
        if settings.get(name) is not None  # unset: the core's default
    }
    comm = _communicator(comm)
    with _session_lock:
        if _session is not None:
            raise StateError(
                "ml_comm is already initialised; call ml_comm.finalize() before init() again"
            )
        launch.check_launch(init_mpi())  # one MPI library; as many ranks as tasks launched
        launch.say_if_alone(init_mpi())
        # On the whole job, whatever comm is: a failing rank must end every rank.
        if init_mpi().COMM_WORLD.Get_size() > 1:
            abort.install_excepthook()  # before the teams: a rank failing there ends the job
            abort.watch_launcher()
        _session = Session(
            nthreads,
            nteams,
            msglen,
            framework,
            chunk_bytes,
            thresholds,
            comm,
            init_mpi(),
            open_exits,
            dict(agreed or {}),
        )


def finalize() -> None:
    """Stop the teams' threads and free their communicators. Safe to call twice.

    Collective: waits for every rank to finalize too, and aborts the job if a rank
    is waiting for this one in a team operation this one never made
    ([Fault tolerance](faults.md#when-a-rank-fails-the-whole-job-ends)).
    """
    global _session
    with _session_lock:
        ending, _session = _session, None
    if ending is None:
        return
    stop.forget()
    try:
        # Every rank's pace rides in the exchange of leaving (faults/departure.py): no
        # collective of its own, so the report can neither hang nor hide an error.
        records = ending.departure.leave(
            ending.teams, ending.barrier, ending.steps_note, ending.pace_record()
        )
        ending.summarise()
        ending.report_slow_ranks(records)
        ending.weights.finalizing()
    finally:
        ending.close()


atexit.register(finalize)


def config_team(
    team: int,
    alg: int,
    ksteps: int,
    max_steps: int,
    verbosity: int = 0,
    perf_freq: int = 100,
    *,
    compression: str | None = None,
) -> None:
    """Choose the team's algorithm, pipelining and reporting ([Calls and their
    rules](api.md#config_team), [Pipelined teams](pipelined.md)).

    compression: "bf16" or "fp16" sends the team's float32 ring reductions as 16-bit
    values (added in float32), "none" sends float32; None (the default) keeps the
    team's setting (ML_COMM_COMPRESSION's at init). Every rank must choose the same.
    """
    s = session()
    handle = s.team(team)
    wire = (
        None if compression is None else _compression.code(compression, "config_team: compression")
    )
    for name, value in (
        ("alg", alg),
        ("ksteps", ksteps),
        ("max_steps", max_steps),
        ("verbosity", verbosity),
        ("perf_freq", perf_freq),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise BadArgumentTypeError(
                f"config_team: {name} must be an int, got {type(value).__name__}"
            )
        if not -(2**63) < value < 2**63:
            raise BadArgumentError(f"config_team: {name}={value} does not fit in a 64-bit integer")
    if alg not in ALGORITHMS:
        names = ", ".join(f"{k} ({v})" for k, v in ALGORITHMS.items())
        raise BadArgumentError(f"config_team: alg {alg} is not an algorithm; use one of {names}")
    if max_steps < 0:
        raise BadArgumentError(f"config_team: max_steps must be >= 0, got {max_steps}")
    if ksteps < 0 and -ksteps > max_steps:
        raise BadArgumentError(
            f"config_team: ksteps={ksteps} asks for the last {-ksteps} steps to be "
            f"synchronous, more than max_steps={max_steps}"
        )
    if verbosity not in (0, 1, 2):
        raise BadArgumentError(f"config_team: verbosity must be 0, 1 or 2, got {verbosity}")
    if perf_freq < 1:
        raise BadArgumentError(f"config_team: perf_freq must be >= 1, got {perf_freq}")
    # A new schedule starts counting calls afresh.
    s.backend.restart(team)
    # The agreement check compares the schedule across ranks on every request.
    check(lib.mlc_team_set_schedule(handle, int(alg), int(ksteps), int(max_steps)), "config_team")
    if wire is not None:
        check(lib.mlc_team_set_compression(handle, wire), "config_team")
    s.configs[team] = TeamConfig(
        int(alg), int(ksteps), int(max_steps), int(verbosity), int(perf_freq)
    )
    s.reporters[team].configure(handle, s.configs[team])


def get_rank() -> int:
    """This rank in the session's communicator (COMM_WORLD's before init)."""
    return _session.rank if _session is not None else init_mpi().COMM_WORLD.Get_rank()


def get_nranks() -> int:
    """The session communicator's size (COMM_WORLD's before init)."""
    return _session.size if _session is not None else init_mpi().COMM_WORLD.Get_size()


def barrier() -> None:
    """Wait for every rank; a rank that leaves meanwhile ends the job
    ([Fault tolerance](faults.md#when-a-rank-fails-the-whole-job-ends))."""
    s = session()
    s.barrier.wait(s.teams, note=s.steps_note)


def version_info() -> dict:
    """Versions and MPI set-up: ml_comm, the MPI library, MPI's thread level, the number of
    ranks, Python and NumPy (a dict of strings, nranks an int)."""
    buf = ffi.new("char[8192]")
    mpi = init_mpi()
    return {
        "ml_comm": ffi.string(lib.mlc_version()).decode(),
        "mpi_library": ffi.string(lib.mlc_mpi_library_version(buf, 8192)).decode().strip(),
        "thread_level": {
            mpi.THREAD_MULTIPLE: "multiple",
            mpi.THREAD_SERIALIZED: "serialized",
            mpi.THREAD_FUNNELED: "funneled",
            mpi.THREAD_SINGLE: "single",
        }.get(mpi.Query_thread(), "unknown"),
        "nranks": get_nranks(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


# ---------------------------------------------------------------- data


def gradients(grads: Sequence, team: int = 0, out: Sequence | None = None) -> list:
    """Average a list of arrays over all ranks; returns new arrays, inputs untouched.

    Arrays of one dtype are fused into one reduction (weights in reverse list order,
    then vectors: the gradients that backprop produces first come first, with either
    framework). On a pipelined team (config_team ksteps < max_steps) a call may return
    the previous call's average instead ([Pipelined teams](pipelined.md)). With
    framework="tensorflow": tensors in and out; with framework="jax": JAX arrays in and
    out, eagerly or inside jax.jit.
    NumPy, synchronous teams: `out` (a list of arrays of the gradients' shapes and
    dtypes, possibly the gradients themselves) receives the averages and is returned.
    """
    s = session()
    backend = s.backend
    if not s.weights.settled:
        try:
            s.calling_team(team, lib.MLC_KIND_ALLREDUCE)  # a bad team id, before a step counts
        except BadArgumentError:
            if len(s.teams) == 1:  # refused on team 0, where the others' call counts a step
                with contextlib.suppress(MLCommError):
                    s.weights.averaged(backend.runs_eagerly(grads), 0, grads, s.calls.identity()[0])
            raise
        s.weights.averaged(backend.runs_eagerly(grads), team, grads, s.calls.identity()[0])
    if out is None:  # NumPy's calls are signed with the caller's identity there
        return backend.gradients(grads, team)
    if backend.name != "numpy":
        raise BadArgumentError("gradients(out=...) takes NumPy arrays (framework=None or 'numpy')")
    return backend.gradients(grads, team, out)


def broadcast(values, root: int = 0, team: int = 0):
    """Overwrite each array in `values` with root's, in place; returns `values`.

    With framework="tensorflow": returns new tensors holding root's values, and assigns
    them to the variables among `values` (tf.Variable, Keras variables). With "jax":
    returns new JAX arrays (JAX arrays cannot be changed in place; one for one array).
    `team`: the team that carries it (the model's, so that it keeps its place among that
    team's calls when another thread drives another team).
    """
    s = session()
    if s.backend.name != "numpy":
        result = s.backend.broadcast(values, root, team)
    else:
        with _call(s, team, lib.MLC_KIND_BROADCAST):
            result = s.backend.broadcast(values, root, team)
    s.weights.shared()  # once it ran: a broadcast that failed shared nothing
    return result


def average(array: np.ndarray, team: int = 0) -> np.ndarray:
    """Average `array` over all ranks, in place; returns it."""
    return _reduce_in_place(array, team, lib.MLC_OP_AVERAGE, "average")


def _call(s: Session, team, kind: int):
    """A call of the NumPy-level API of `kind` on `team` (Calls.calling): a bad team id
    raises there, refused on the job's one team (Session.calling_team)."""
    return s.calls.calling(team, s.calling_team(team, kind), kind)


def allreduce_sum(array: np.ndarray, team: int = 0) -> np.ndarray:
    """Sum `array` over all ranks, in place; returns it."""
    return _reduce_in_place(array, team, lib.MLC_OP_SUM, "allreduce_sum")


def _reduce_in_place(array: np.ndarray, team: int, op: int, what: str) -> np.ndarray:
    s = session()
    if s.backend.name == "numpy":  # one C call for a plain array
        return s.backend.reduce_in_place(array, team, op, what)
    with _call(s, team, lib.MLC_KIND_ALLREDUCE):
        return reductions.reduce_in_place(s, array, team, op, what)


def allreduce(array: np.ndarray, op: str = "sum", team: int = 0) -> np.ndarray:
    """A new array holding `array` reduced over all ranks; the input is not written.

    op: "sum", "average", "min", "max" or "product" ([Collectives](collectives.md)).
    """
    s = session()
    with _call(s, team, lib.MLC_KIND_ALLREDUCE):
        return collectives.allreduce(s, array, op, team)


def allgather(array: np.ndarray, team: int = 0) -> np.ndarray:
    """Every rank's rows of `array`, concatenated in rank order along the first dimension.

    The first dimension may differ by rank (0 included); the other dimensions and the
    dtype must agree, else every rank raises MismatchError naming each rank's call.
    """
    s = session()
    with _call(s, team, lib.MLC_KIND_ALLGATHER):
        return collectives.allgather(s, array, team)


def reducescatter(array: np.ndarray, op: str = "average", team: int = 0) -> np.ndarray:
    """`array` (the same shape on every rank) reduced over the ranks with op ("sum" or
    "average"; also "min", "max", "product"), of which this rank gets its share of rows:
    rows // size, one more on each of the first rows % size ranks, in rank order."""
    s = session()
    with _call(s, team, lib.MLC_KIND_REDUCESCATTER):
        return collectives.reducescatter(s, array, op, team)


def alltoall(array: np.ndarray, splits=None, team: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Send splits[d] rows of `array` (in order) to rank d; returns (the rows received,
    in rank order, and an int64 array of how many came from each rank). splits=None:
    the rows split evenly over the ranks."""
    s = session()
    with _call(s, team, lib.MLC_KIND_ALLTOALL):
        return collectives.alltoall(s, array, splits, team)


def step(number: int | None = None):
    """Mark a training step: `with ml_comm.step(i): ...` around each step's calls.

    Every call inside carries the step's number and its place in the step, and the ranks
    check them with its layout: a rank that left a step early (an exception it caught) or
    skipped a call is found at its next call; the ranks behind raise MismatchError naming
    the ranks ahead and how far, the ranks ahead wait for the others' next call, and the
    steps after are exact. number: the step's number (>= 1; None: this thread's previous
    step + 1). Steps do not nest; each thread marks its own.
    """
    return session().calls.step(number)


def check_buffers_match(values, flag: int = 1) -> int:
    """0 when every rank holds the same buffers as rank 0, else the number of ranks that differ.

    flag: when nonzero, each rank whose buffers differ prints so.
    """
    s = session()
    with s.calls.calling(0, s.team(0), lib.MLC_KIND_BROADCAST):
        differing = broadcasts.check_buffers_match(s, values, flag)
    if differing == 0:  # every rank's count: the weights check ends alike on every rank
        s.weights.shared()
    return differing


def team_settings(team: int = 0) -> dict:
    """A team's effective settings: nthreads, algorithm, chunk_bytes, fusion_bytes,
    latency_bytes (recursive doubling below), inline_bytes (caller's thread up to),
    direct_bytes (up to: one exchange that also checks that the ranks agree),
    rabenseifner_bytes (Rabenseifner below, from latency_bytes, at power-of-two ranks >= 4),
    submit_bytes (a TensorFlow gradient of one tensor up to: reduced by its own op),
    compression ("none", "bf16" or "fp16": what the ring's float32 messages carry)."""
    s = session()
    out = ffi.new("mlc_team_settings *")
    lib.mlc_team_get_settings(s.team(team), out)
    names = ("nthreads", "algorithm", "chunk_bytes", "fusion_bytes", "latency_bytes")
    settings = {
        name: getattr(out, name)
        for name in (*names, "inline_bytes", "direct_bytes", "rabenseifner_bytes", "submit_bytes")
    }
    settings["compression"] = _compression.name(out.compression)
    return settings


def team_stats(team: int = 0) -> dict:
    """Counters of a team: calls, bytes, busy_seconds, wait_seconds, exposed_seconds, and
    thread_cpu_seconds (CPU time the team's communication threads have used, waits
    included; the difference over N steps / N is their CPU cost per step)."""
    s = session()
    s.team(team)
    return s.stats(team)


# ------------------------------------------------------- stopping together (faults/stop.py)


def catch_stop_signals(signals=stop.DEFAULT_SIGNALS) -> None:
    """Make each of `signals` (received by any rank) ask every rank to stop, instead of
    ending the process; the program ends its loop when `should_stop()` says so. Call
    after `init`, from the main thread."""
    stop.catch_stop_signals(session(), signals)


def request_stop() -> None:
    """Ask every rank to stop: every rank's `should_stop()` turns true after the same
    step. Safe to call from a signal handler, and more than once (also before init)."""
    stop.request_stop(_session)


def should_stop(team: int = 0) -> bool:
    """True on every rank after the same step, once any rank asked to stop (a signal
    caught by `catch_stop_signals`, or `request_stop`). Call it between steps, on the
    thread that drives the team, at the same point on every rank."""
    return stop.should_stop(session(), team)
