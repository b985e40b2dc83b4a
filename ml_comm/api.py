"""The Cray-compatible Python API over NumPy buffers (DESIGN.md section 1).

State lives in one `_Session` per process (Python's side; the C core itself has
no globals). Arguments are validated here, before anything is sent, so a bad
call raises on every rank that makes it and leaves the process usable.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import _dtypes, _faults, checks, pipeline, settings_check, stop, timeline
from ._core import ffi, lib
from ._mpi import init_mpi
from .errors import MLCommError
from .report import TeamReporter, stats_dict

ALG_AUTO = lib.MLC_ALG_AUTO
ALG_RING = lib.MLC_ALG_RING
ALG_RECURSIVE_DOUBLING = lib.MLC_ALG_RECURSIVE_DOUBLING
ALGORITHMS = {ALG_AUTO: "auto", ALG_RING: "ring", ALG_RECURSIVE_DOUBLING: "recursive_doubling"}
FRAMEWORKS = (None, "numpy", "tensorflow")

DEFAULT_CHUNK_BYTES = 1 << 20
# Environment overrides of the core's size thresholds (their defaults live in csrc/team.c
# and, for the direct allreduce, csrc/checks.h).
THRESHOLD_SETTERS = {
    "ML_COMM_LATENCY_BYTES": lib.mlc_team_set_latency_threshold,
    "ML_COMM_INLINE_BYTES": lib.mlc_team_set_inline_threshold,
    "ML_COMM_DIRECT_BYTES": lib.mlc_team_set_direct_threshold,
}
_ERR_LEN = 512


@dataclass
class TeamConfig:
    alg: int = ALG_AUTO
    ksteps: int = 0
    max_steps: int = 0
    verbosity: int = 0
    perf_freq: int = 100


class _Session:
    """One init()..finalize() lifetime: the context, the teams and their settings."""

    def __init__(
        self,
        nthreads: int,
        nteams: int,
        msglen: int,
        framework: str | None,
        chunk_bytes: int,
        thresholds: dict[str, int],
    ):
        self.guard = checks.from_env()  # a malformed variable raises before anything starts
        self.mpi = init_mpi()
        settings_check.verify(
            self.mpi.COMM_WORLD, nthreads, nteams, msglen, chunk_bytes, self.guard, thresholds
        )
        self.framework = framework
        self.err = ffi.new(f"char[{_ERR_LEN}]")
        self.ctx = lib.mlc_context_create(
            self.mpi._addressof(self.mpi.COMM_WORLD), self.err, _ERR_LEN
        )
        if self.ctx == ffi.NULL:
            raise MLCommError(_text(self.err))
        self.rank = lib.mlc_context_rank(self.ctx)
        self.size = lib.mlc_context_size(self.ctx)
        self.departure = _faults.Departure(self.mpi, self.size)
        self.teams: list = []
        self.tf = None  # the TensorFlow binding, with framework="tensorflow"
        # NumPy pipelined teams: team -> {gradient layout: pipeline.Stage}
        self.pipelines: dict[int, dict] = {}
        self.configs = [TeamConfig() for _ in range(nteams)]
        self.reporters = [
            TeamReporter(t, self.rank, framework == "tensorflow") for t in range(nteams)
        ]
        try:
            for _ in range(nteams):
                out = ffi.new("mlc_team **")
                rc = lib.mlc_team_create(
                    self.ctx, nthreads, 4 * msglen, chunk_bytes, out, self.err, _ERR_LEN
                )
                if rc == lib.MLC_ERR_NOMEM:
                    raise MLCommError(
                        f"could not create a team: {_text(self.err)}; msglen={msglen} asks for a "
                        f"fusion buffer of {4 * msglen / 2**30:.1f} GiB per team: use a smaller "
                        "msglen (larger gradient sets are streamed through the buffer)"
                    )
                if rc != lib.MLC_OK:
                    raise MLCommError(f"could not create a team: {_text(self.err)}")
                self.teams.append(out[0])
                checks.apply(out[0], len(self.teams) - 1, self.guard)
                for name, value in thresholds.items():
                    _check(THRESHOLD_SETTERS[name](out[0], value), name)
            if timeline.enabled():
                timeline.enable(self.teams)
            if framework == "tensorflow":
                self.tf = _tensorflow_binding()
                self.tf_team_ids = self.tf.set_live_teams(
                    [int(ffi.cast("uintptr_t", t)) for t in self.teams]
                )
        except BaseException:
            self.close()
            raise
        self.nthreads = nthreads
        self.chunk_bytes = chunk_bytes
        self.msglen = msglen

    def team(self, team: int):
        if type(team) is not int and not isinstance(team, np.integer):
            raise TypeError(f"team must be an int, got {type(team).__name__}")
        if not 0 <= team < len(self.teams):
            raise ValueError(
                f"team {team} is out of range: this job has teams 0..{len(self.teams) - 1} "
                f"(set their number with init(nteams=...))"
            )
        return self.teams[team]

    def stats(self, team: int) -> dict:
        s = ffi.new("mlc_team_stats *")
        lib.mlc_team_get_stats(self.teams[team], s)
        return stats_dict(s)

    def close(self) -> None:
        for stages in self.pipelines.values():
            pipeline.drain_all(stages, _wait_one)
        self.pipelines = {}
        if self.tf is not None:
            self.tf.set_live_teams([])  # before the teams go: their ops must fail cleanly
        for team in self.teams:
            lib.mlc_team_destroy(team)
        self.teams = []
        if self.ctx != ffi.NULL:
            lib.mlc_context_destroy(self.ctx)
            self.ctx = ffi.NULL
        self.departure.close()


def _tensorflow_binding():
    try:
        from . import tensorflow as binding
    except ImportError as exc:
        raise MLCommError(
            f"framework='tensorflow' needs TensorFlow ({exc}); pip install 'ml_comm[tf]'"
        ) from exc
    binding.check_version()
    binding.load_ops()
    return binding


_session: _Session | None = None
_session_lock = threading.Lock()


def _text(buf) -> str:
    return ffi.string(buf).decode(errors="replace")


def _check(rc: int, what: str, err=None) -> None:
    if rc != lib.MLC_OK:
        detail = _text(err) if err is not None else ""
        name = ffi.string(lib.mlc_status_name(rc)).decode()
        raise MLCommError(f"{what} failed: {detail or name}")


def _active() -> _Session:
    if _session is None:
        raise MLCommError(
            "ml_comm is not initialised: call ml_comm.init(nthread_per_team, nteams, "
            "msglen) first (it is also needed again after finalize())"
        )
    return _session


def _positive_int(name: str, value, upper: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1 or (upper is not None and value > upper):
        bound = f"between 1 and {upper}" if upper is not None else "at least 1"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


# ---------------------------------------------------------------- life cycle


def init(
    nthread_per_team: int,
    nteams: int,
    msglen: int,
    framework: str | None = None,
    *,
    chunk_bytes: int | None = None,
) -> None:
    """Start MPI if needed and create `nteams` teams of `nthread_per_team` threads.

    msglen: element count (float32 elements, typically the model's parameter count)
    that sizes each team's fusion buffer; larger gradient sets are streamed through it.
    chunk_bytes: pipelining segment size (default ML_COMM_CHUNK_BYTES or 1 MiB).
    """
    global _session
    nthreads = _positive_int("nthread_per_team", nthread_per_team, 256)
    nteams = _positive_int("nteams", nteams, 64)
    msglen = _positive_int("msglen", msglen, 1 << 40)
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    if chunk_bytes is None:
        chunk_bytes = _env_int("ML_COMM_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)
    chunk_bytes = _positive_int("chunk_bytes", chunk_bytes)
    if chunk_bytes < 8:
        raise ValueError(f"chunk_bytes must be at least 8, got {chunk_bytes}")
    thresholds = {}
    for name in THRESHOLD_SETTERS:
        value = _env_int(name, -1)
        if name in os.environ and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        if value >= 0:
            thresholds[name] = value
    with _session_lock:
        if _session is not None:
            raise MLCommError(
                "ml_comm is already initialised; call ml_comm.finalize() before init() again"
            )
        if init_mpi().COMM_WORLD.Get_size() > 1:
            _faults.install_excepthook()  # before the teams: a rank failing there ends the job
            _faults.watch_launcher()
        _session = _Session(nthreads, nteams, msglen, framework, chunk_bytes, thresholds)


def finalize() -> None:
    """Stop the teams' threads and free their communicators. Safe to call twice.

    Collective: waits for every rank to finalize too, and aborts the job if a rank
    is waiting for this one in a team operation this one never made (_faults.py).
    """
    global _session
    with _session_lock:
        session, _session = _session, None
    if session is None:
        return
    stop.forget_session()
    try:
        session.departure.leave(session.teams)
    except BaseException:
        session.close()
        raise
    for t, cfg in enumerate(session.configs):
        session.reporters[t].summary(cfg, session.stats(t))
    try:
        if timeline.enabled():
            timeline.write(session.rank, session.size, session.teams)
    finally:
        session.close()


atexit.register(finalize)


def config_team(
    team: int, alg: int, ksteps: int, max_steps: int, verbosity: int = 0, perf_freq: int = 100
) -> None:
    """Choose the team's algorithm and reporting; see the README for every argument."""
    s = _active()
    handle = s.team(team)
    for name, value in (
        ("alg", alg),
        ("ksteps", ksteps),
        ("max_steps", max_steps),
        ("verbosity", verbosity),
        ("perf_freq", perf_freq),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"config_team: {name} must be an int, got {type(value).__name__}")
        if not -(2**63) < value < 2**63:
            raise ValueError(f"config_team: {name}={value} does not fit in a 64-bit integer")
    if alg not in ALGORITHMS:
        names = ", ".join(f"{k} ({v})" for k, v in ALGORITHMS.items())
        raise ValueError(f"config_team: alg {alg} is not an algorithm; use one of {names}")
    if max_steps < 0:
        raise ValueError(f"config_team: max_steps must be >= 0, got {max_steps}")
    if ksteps < 0 and -ksteps > max_steps:
        raise ValueError(
            f"config_team: ksteps={ksteps} asks for the last {-ksteps} steps to be "
            f"synchronous, more than max_steps={max_steps}"
        )
    if verbosity not in (0, 1, 2):
        raise ValueError(f"config_team: verbosity must be 0, 1 or 2, got {verbosity}")
    if perf_freq < 1:
        raise ValueError(f"config_team: perf_freq must be >= 1, got {perf_freq}")
    # A new schedule starts counting calls afresh: a reduction in flight finishes
    # (under the old settings) and its result is dropped.
    pipeline.drain_all(s.pipelines.pop(team, {}), _wait_one)
    if s.tf is not None:
        s.tf.reset_pipelines(s.tf_team_ids[team])
    _check(lib.mlc_team_set_algorithm(handle, int(alg)), "config_team")
    s.configs[team] = TeamConfig(
        int(alg), int(ksteps), int(max_steps), int(verbosity), int(perf_freq)
    )
    s.reporters[team].configure(handle, s.configs[team])


def get_rank() -> int:
    return _session.rank if _session is not None else init_mpi().COMM_WORLD.Get_rank()


def get_nranks() -> int:
    return _session.size if _session is not None else init_mpi().COMM_WORLD.Get_size()


def barrier() -> None:
    _check(lib.mlc_context_barrier(_active().ctx), "barrier")


def version_info() -> dict:
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


# ---------------------------------------------------------------- buffers


def _as_array(value, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        hint = ""
        if type(value).__module__.startswith(("tensorflow", "keras")):
            hint = " (for TensorFlow tensors, init ml_comm with framework='tensorflow')"
        raise TypeError(f"{what} must be a numpy.ndarray, got {type(value).__name__}{hint}")
    return value


def _in_place_array(value, what: str) -> np.ndarray:
    arr = _as_array(value, what)
    _dtypes.code_of(arr.dtype)
    if not arr.flags.writeable:
        raise ValueError(
            f"{what} is read-only; ml_comm writes the result into it in place "
            "(pass a writeable copy, e.g. array.copy())"
        )
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise ValueError(
            f"{what} is not contiguous; ml_comm reduces it in place as one block "
            "(pass numpy.ascontiguousarray(array) and use the returned array)"
        )
    return arr


def _buffer(arr: np.ndarray):
    """cffi view of a contiguous array's memory (a Fortran-ordered one through its C-ordered .T)."""
    return ffi.from_buffer(arr if arr.flags.c_contiguous else arr.T)


def _tensor_list(arrays: Sequence[np.ndarray], sources: Sequence[np.ndarray] | None = None):
    tensors = ffi.new("mlc_tensor[]", max(len(arrays), 1))
    keep = []
    for i, arr in enumerate(arrays):
        buf = _buffer(arr)  # writeability was checked by the caller
        keep.append(buf)
        tensors[i].data = buf
        tensors[i].count = arr.size
        if sources is not None:
            src = _buffer(sources[i])
            keep.append(src)
            tensors[i].source = src
    return tensors, keep


def _reduce_in_place(arr: np.ndarray, team: int, op: int, what: str) -> np.ndarray:
    s = _active()
    handle = s.team(team)
    arr = _in_place_array(arr, what)
    rc = lib.mlc_team_allreduce_buffer(
        handle, _buffer(arr), arr.size, _dtypes.CODES[arr.dtype], op, s.err, _ERR_LEN
    )
    _check(rc, what, s.err)
    return arr


def average(array: np.ndarray, team: int = 0) -> np.ndarray:
    """Average `array` over all ranks, in place; returns it."""
    return _reduce_in_place(array, team, lib.MLC_OP_AVERAGE, "average")


def allreduce_sum(array: np.ndarray, team: int = 0) -> np.ndarray:
    """Sum `array` over all ranks, in place; returns it."""
    return _reduce_in_place(array, team, lib.MLC_OP_SUM, "allreduce_sum")


def _group_by_dtype(arrays: Sequence[np.ndarray]) -> dict[np.dtype, list[int]]:
    groups: dict[np.dtype, list[int]] = {}
    for i, arr in enumerate(arrays):
        _dtypes.code_of(arr.dtype)
        groups.setdefault(arr.dtype, []).append(i)
    return groups


def gradients(grads: Sequence[np.ndarray], team: int = 0) -> list[np.ndarray]:
    """Average a list of arrays over all ranks; returns new arrays, inputs untouched.

    Arrays of one dtype are fused into one reduction, laid out in reverse list
    order (the gradients that backprop produces first come first). On a pipelined
    team (config_team ksteps < max_steps) a call may return the previous call's
    average instead; see pipeline.py.
    """
    s = _active()
    handle = s.team(team)
    config = s.configs[team]
    if s.tf is not None:
        out = s.tf.gradients(
            grads, s.tf_team_ids[team], s.size, ksteps=config.ksteps, max_steps=config.max_steps
        )
        return out
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"gradients takes a list of numpy arrays, got {type(grads).__name__}")
    # order="C" copies only arrays that are not C-contiguous, and keeps 0-d arrays 0-d
    # (np.ascontiguousarray would make them 1-d).
    inputs = [np.asarray(_as_array(g, f"gradients[{i}]"), order="C") for i, g in enumerate(grads)]
    outputs: list = [None] * len(inputs)
    groups = _group_by_dtype(inputs)
    if not pipeline.is_pipelined(config.ksteps, config.max_steps):
        _average_groups(handle, inputs, groups, outputs)
    else:
        stages = s.pipelines.setdefault(team, {})
        for idx in groups.values():
            order = idx[::-1]
            arrays = [inputs[i] for i in order]
            stage = stages.setdefault(pipeline.layout_of(arrays), pipeline.Stage())
            phase = lib.mlc_step_phase(stage.calls, config.ksteps, config.max_steps)
            results = pipeline.step(
                stage,
                phase,
                arrays,
                lambda a: _average_now(handle, a),
                lambda a: _submit_average(handle, a, a, in_place=True),
                _wait_one,
            )
            for i, r in zip(order, results):
                outputs[i] = r
    stop.note_call(team)
    return outputs


def _submit_average(
    handle,
    outputs: list[np.ndarray],
    inputs: list[np.ndarray],
    in_place=False,
    part=0,
    nparts=1,
    call_dtypes=0,
):
    """Start an asynchronous average of arrays of one dtype; returns (request, keep).

    part/nparts: this request's place among the call's requests (one per dtype), and
    call_dtypes the bits of the call's dtypes, so that ranks whose lists split into
    different dtypes fail alike, naming them (csrc/signature.c)."""
    tensors, keep = _tensor_list(outputs, None if in_place else inputs)
    out = ffi.new("mlc_request **")
    rc = lib.mlc_team_allreduce_async_part(
        handle,
        tensors,
        len(outputs),
        _dtypes.CODES[outputs[0].dtype],
        lib.MLC_OP_AVERAGE,
        part,
        nparts,
        call_dtypes,
        ffi.NULL,
        ffi.NULL,
        out,
    )
    _check(rc, "gradients")
    return out[0], (tensors, keep)


def _average_groups(handle, inputs, groups, outputs) -> None:
    """Synchronous: one fused request per dtype, all in flight at once."""
    requests = []
    orders = []
    keep = []
    try:
        for part, idx in enumerate(groups.values()):
            order = idx[::-1]
            for i in order:
                outputs[i] = np.empty(inputs[i].shape, inputs[i].dtype)
            request, k = _submit_average(
                handle,
                [outputs[i] for i in order],
                [inputs[i] for i in order],
                part=part,
                nparts=len(groups),
                call_dtypes=_dtypes.bits(groups),
            )
            keep.append(k)
            requests.append(request)
            orders.append(order)
    finally:
        errors = _wait_all(requests, orders)
    if errors:
        raise MLCommError("gradients failed: " + "; ".join(errors))


def _average_now(handle, arrays: list[np.ndarray]) -> list[np.ndarray]:
    outputs = [np.empty(a.shape, a.dtype) for a in arrays]
    request, _keep = _submit_average(handle, outputs, arrays)
    _wait_one(request)
    return outputs


def _wait_one(request) -> None:
    errors = _wait_all([request])
    if errors:
        raise MLCommError("gradients failed: " + "; ".join(errors))


def _wait_all(requests, orders=None) -> list[str]:
    """Wait for and free the requests; their distinct error messages. orders[k]: the
    gradient list index of each tensor of request k, for NaN/Inf reports."""
    errors = []
    for k, req in enumerate(requests):
        status = lib.mlc_request_wait(req)
        if status != lib.MLC_OK:
            order = orders[k] if orders is not None else None
            text = checks.request_error(req, status, order, "gradients")
            if text not in errors:  # the parts of a failed call repeat its message
                errors.append(text)
        stop.note_request(req)
        lib.mlc_request_free(req)
    return errors


def _check_root(root, size: int) -> None:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an int, got {type(root).__name__}")
    if not 0 <= root < size:
        raise ValueError(f"root {root} is out of range: ranks are 0..{size - 1}")


def broadcast(values, root: int = 0):
    """Overwrite each array in `values` with root's, in place; returns `values`.

    With framework="tensorflow": returns new tensors holding root's values.
    """
    s = _active()
    if s.tf is not None:
        _check_root(root, s.size)
        return s.tf.broadcast(values, s.tf_team_ids[0], int(root))
    single = isinstance(values, np.ndarray)
    arrays = [values] if single else values
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"broadcast takes a list of numpy arrays, got {type(values).__name__}")
    _check_root(root, s.size)
    arrays = [_in_place_array(a, f"broadcast value {i}") for i, a in enumerate(arrays)]
    _broadcast_arrays(s, arrays, root)
    return values


def _broadcast_arrays(s: _Session, arrays: list[np.ndarray], root: int) -> None:
    groups = _group_by_dtype(arrays)
    dtypes = _dtypes.bits(groups)
    for part, (dtype, idx) in enumerate(groups.items()):
        tensors, keep = _tensor_list([arrays[i] for i in idx])
        code = _dtypes.CODES[dtype]
        rc = lib.mlc_team_broadcast_part(
            s.teams[0], tensors, len(idx), code, root, part, len(groups), dtypes, s.err, _ERR_LEN
        )
        _check(rc, "broadcast", s.err)


def check_buffers_match(values, flag: int = 1) -> int:
    """0 when every rank holds the same buffers as rank 0, else the number of ranks that differ.

    flag: when nonzero, each rank whose buffers differ prints so.
    """
    s = _active()
    if not isinstance(values, (np.ndarray, list, tuple)):
        raise TypeError(
            "check_buffers_match takes a numpy array or a list of them, "
            f"got {type(values).__name__}"
        )
    arrays = [values] if isinstance(values, np.ndarray) else list(values)
    digest = hashlib.blake2b(digest_size=16)
    for i, a in enumerate(arrays):
        a = np.asarray(_as_array(a, f"check_buffers_match value {i}"), order="C")
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    mine = np.frombuffer(digest.digest(), dtype=np.int64).copy()
    reference = mine.copy()
    _broadcast_arrays(s, [reference], 0)  # NumPy whatever the framework
    differs = np.array([0 if np.array_equal(mine, reference) else 1], dtype=np.int64)
    if differs[0] and flag:
        print(f"ml_comm: rank {s.rank}: buffers differ from rank 0's", file=sys.stderr, flush=True)
    allreduce_sum(differs)
    return int(differs[0])


def team_settings(team: int = 0) -> dict:
    """A team's effective settings: nthreads, algorithm, chunk_bytes, fusion_bytes,
    latency_bytes (recursive doubling below), inline_bytes (caller's thread up to),
    direct_bytes (up to: one exchange that also checks that the ranks agree)."""
    s = _active()
    out = ffi.new("mlc_team_settings *")
    lib.mlc_team_get_settings(s.team(team), out)
    names = ("nthreads", "algorithm", "chunk_bytes", "fusion_bytes", "latency_bytes")
    return {name: getattr(out, name) for name in (*names, "inline_bytes", "direct_bytes")}


def team_stats(team: int = 0) -> dict:
    """Counters of a team: calls, bytes, busy_seconds, wait_seconds, exposed_seconds."""
    s = _active()
    s.team(team)
    return s.stats(team)
