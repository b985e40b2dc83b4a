"""One init()..finalize() lifetime: the communicator, the C context, the teams, their
settings, and the framework backend that gradients/broadcast go through.

State lives in one Session per process (Python's side; the C core itself has no
globals). The session knows no framework: it hands itself to the backend that
init's `framework` names (backend.py). MPI (mpi4py's module, which the caller has
checked) and the ways out of the job that watch for departed peers (faults/) are
handed in by the caller, which sits above both.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core import ffi, lib
from . import (
    backend,
    checks,
    compression,
    device_staging,
    pace,
    settings,
    settings_check,
    slow_ranks,
    thread_cores,
    timeline,
)
from .calls import Calls
from .errors import BadArgumentError, BadArgumentTypeError, MLCommError, OutOfMemoryError
from .output import say
from .report import TeamReporter, stats_dict
from .status import ERR_LEN, check, error, text
from .weights_notice import WeightsNotice

ALG_AUTO = lib.MLC_ALG_AUTO
THREAD_SLICE = "ML_COMM_THREAD_SLICE_US"
DEADLOCK = "ML_COMM_DEADLOCK_SECONDS"
WEIGHTS_CHECK = "ML_COMM_WEIGHTS_CHECK"
# Environment overrides of the core's size thresholds (their defaults live in csrc/team/team.c
# and, for the direct allreduce, csrc/agree/agree.h).
THRESHOLD_SETTERS = {
    "ML_COMM_LATENCY_BYTES": lib.mlc_team_set_latency_threshold,
    "ML_COMM_INLINE_BYTES": lib.mlc_team_set_inline_threshold,
    "ML_COMM_SUBMIT_BYTES": lib.mlc_team_set_submit_threshold,
    "ML_COMM_DIRECT_BYTES": lib.mlc_team_set_direct_threshold,
    "ML_COMM_RABENSEIFNER_BYTES": lib.mlc_team_set_rabenseifner_threshold,
}


# Team ids, never reused in the process (a later team may get a finalized one's address,
# never its id): operations built for a team that is gone carry an id no live team has.
_TEAM_IDS = itertools.count(1)


def is_pipelined(ksteps: int, max_steps: int) -> bool:
    """Whether some call of a team configured so is not synchronous."""
    return ksteps < max_steps and ksteps != -max_steps


@dataclass
class TeamConfig:
    alg: int = ALG_AUTO
    ksteps: int = 0
    max_steps: int = 0
    verbosity: int = 0
    perf_freq: int = 100


class _ThreadErrors(threading.local):
    """The calling thread's error buffers, by team number (each thread starts empty)."""

    def __init__(self):
        self.by_team: dict[int, Any] = {}


class Session:
    """The context and teams on `comm`; rank and size are this communicator's."""

    def __init__(
        self,
        nthreads: int,
        nteams: int,
        msglen: int,
        framework: str,
        chunk_bytes: int,
        thresholds: dict[str, int],
        comm,
        mpi,
        open_exits: Callable[[object, object], tuple[Any, Any]],
        agreed: dict[str, str],
    ):
        self.guard = checks.from_env()  # a malformed variable raises before anything starts
        self.compression = compression.from_env()
        self.thread_slice_ns = settings.get(THREAD_SLICE) * 1000
        self.mpi = mpi
        # Before any team: ranks with other thread counts would hang creating one.
        settings_check.verify(
            comm,
            nthreads,
            nteams,
            msglen,
            chunk_bytes,
            self.guard,
            thresholds,
            self.compression,
            {"framework": framework, **agreed},  # tensors on one rank, arrays on another
        )
        # Collective, and before any team: a rank whose list is wrong fails every rank.
        self.thread_cores = thread_cores.choose(comm, mpi)
        self.comm = comm
        self.err = ffi.new(f"char[{ERR_LEN}]")  # init's and finalize's, on one thread
        # Each thread's own, per team: teams run on several threads at once, with the GIL
        # released, and a thread that calls on a team another drives must read its own text.
        self._thread_errs = _ThreadErrors()
        # The registry of live teams: by team number, the core's handle and the team's id.
        self.teams: list = []
        self.team_ids: list[int] = []
        self.backend: backend.Backend | None = None
        self.departure = None
        self.barrier = None
        # How far this rank's training got ("rank 1 ran 10 training steps on team 0"), for
        # the messages of a rank that leaves or waits while a peer waits for it: set by a
        # front end (the Keras hook); ranks that ran different numbers of steps are the
        # usual cause.
        self.steps_note: Callable[[], str] | None = None
        self.ctx = lib.mlc_context_create(self.mpi._addressof(comm), self.err, ERR_LEN)
        if self.ctx == ffi.NULL:
            raise MLCommError(text(self.err))
        self.rank = lib.mlc_context_rank(self.ctx)
        self.size = lib.mlc_context_size(self.ctx)
        self.weights = WeightsNotice(self.rank, self.size, settings.get(WEIGHTS_CHECK))
        check(lib.mlc_context_set_deadlock_limit(self.ctx, settings.get(DEADLOCK)), DEADLOCK)
        self.configs = [TeamConfig() for _ in range(nteams)]
        self.calls = Calls()  # where each team's caller stands (core/calls.py)
        try:
            # (departure, barrier): leaving together, and barrier(), on duplicates of comm
            self.departure, self.barrier = open_exits(mpi, comm)
            for _ in range(nteams):
                self.teams.append(self._create_team(nthreads, msglen, chunk_bytes))
                self.team_ids.append(next(_TEAM_IDS))
                checks.apply(self.teams[-1], len(self.teams) - 1, self.guard)
                self.weights.attach(self.teams[-1])
                for name, value in thresholds.items():
                    check(THRESHOLD_SETTERS[name](self.teams[-1], value), name)
                check(
                    lib.mlc_team_set_compression(self.teams[-1], self.compression),
                    compression.VARIABLE,
                )
                check(
                    lib.mlc_team_set_thread_slice(self.teams[-1], self.thread_slice_ns),
                    THREAD_SLICE,
                )
                thread_cores.apply(self.teams[-1], self.thread_cores)
                device_staging.apply(self.teams[-1])
            if timeline.enabled():
                timeline.enable(self.teams)
            self.backend = backend.create(framework, self)
        except BaseException:
            self.close()
            raise
        self.reporters = [
            TeamReporter(t, self.rank, self.backend.nonblocking_ops) for t in range(nteams)
        ]
        self.nthreads = nthreads
        self.chunk_bytes = chunk_bytes
        self.msglen = msglen
        # init ends on every rank together (its last steps are collective): the start of
        # the span the slow-rank report compares (slow_ranks.py).
        self.started = time.monotonic()

    def _create_team(self, nthreads: int, msglen: int, chunk_bytes: int):
        out = ffi.new("mlc_team **")
        rc = lib.mlc_team_create(
            self.ctx, nthreads, 4 * msglen, chunk_bytes, out, self.err, ERR_LEN
        )
        if rc == lib.MLC_ERR_NOMEM:
            raise OutOfMemoryError(
                f"could not create a team: {text(self.err)}; msglen={msglen} asks for a "
                f"fusion buffer of {4 * msglen / 2**30:.1f} GiB per team: use a smaller "
                "msglen (larger gradient sets are streamed through the buffer)"
            )
        if rc != lib.MLC_OK:
            raise error(rc, f"could not create a team: {text(self.err)}")
        return out[0]

    def team_err(self, team: int):
        """The calling thread's error buffer for team `team`'s calls (a C char array of
        ERR_LEN)."""
        errs = self._thread_errs.by_team
        err = errs.get(team)
        if err is None:
            err = errs[team] = ffi.new(f"char[{ERR_LEN}]")
        return err

    def team(self, team: int):
        """The handle of team number `team`; BadArgumentTypeError / BadArgumentError name a
        bad id."""
        if type(team) is int and 0 <= team < len(self.teams):
            return self.teams[team]
        if type(team) is not int and not isinstance(team, np.integer):
            raise BadArgumentTypeError(f"team must be an int, got {type(team).__name__}")
        if not 0 <= team < len(self.teams):
            raise BadArgumentError(
                f"team {team} is out of range: this job has teams 0..{len(self.teams) - 1} "
                f"(set their number with init(nteams=...))"
            )
        return self.teams[team]

    def calling_team(self, team, kind: int):
        """team(team) for a call of the NumPy-level API of `kind` (MLC_KIND_*). A bad id
        on a job of one team is refused on that team, so that the others' call fails
        naming this rank instead of pairing with this rank's next call; on a job of
        several teams this rank cannot tell which team the others call (a refusal waits
        for their call on its team)."""
        try:
            return self.team(team)
        except BadArgumentError as exc:
            if self.size > 1 and len(self.teams) == 1:
                try:
                    with self.calls.calling(0, self.teams[0], kind):
                        raise exc
                except MLCommError:
                    pass
            raise

    def root_index(self, root) -> int:
        """A broadcast's root as an int (BadArgumentTypeError otherwise); one out of range
        goes to the core, which fails the broadcast on every rank, naming this one."""
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
            raise BadArgumentTypeError(f"root must be an int, got {type(root).__name__}")
        # past int32 the core's root would wrap: any such root is out of range alike
        return int(root) if -(2**31) <= root < 2**31 else -1

    def check_root(self, root) -> int:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
            raise BadArgumentTypeError(f"root must be an int, got {type(root).__name__}")
        if not 0 <= root < self.size:
            raise BadArgumentError(f"root {root} is out of range: ranks are 0..{self.size - 1}")
        return int(root)

    def stats(self, team: int) -> dict:
        s = ffi.new("mlc_team_stats *")
        lib.mlc_team_get_stats(self.teams[team], s)
        return stats_dict(s)

    def pace(self) -> pace.RankPace:
        """This rank's pace so far, for the report at finalize: each team's waits as its
        report counts them (report.py: blocking waits, or framework ops' exposed time)."""
        waited = calls = 0
        for t in range(len(self.teams)):
            stats = self.stats(t)
            waited += stats[self.reporters[t].waited_key]
            calls += stats["calls"]
        return pace.this_rank(time.monotonic() - self.started, waited, calls)

    def pace_record(self) -> bytes:
        """pace() as the bytes that leaving carries; never raises (leaving must go on)."""
        try:
            return self.pace().pack()
        except Exception:  # noqa: BLE001 - a report must never stop a rank from leaving
            return pace.UNKNOWN

    def report_slow_ranks(self, records: list[bytes]) -> None:
        """finalize, rank 0: the line naming the ranks every step waits for, if any."""
        if self.rank != 0 or len(records) != self.size:
            return
        try:
            percent = settings.get(slow_ranks.VARIABLE)
            paces = [pace.unpack(r) for r in records]
            text = slow_ranks.line(slow_ranks.judge(paces, percent), percent)
        except Exception as exc:  # noqa: BLE001 - a report must not fail a job that ended well
            text = f"ml_comm: no slow-rank report: {exc}"
        if text is not None:
            say(text)

    def summarise(self) -> None:
        """finalize: each team's closing report line (config_team verbosity)."""
        for t, cfg in enumerate(self.configs):
            self.reporters[t].summary(cfg, self.stats(t))
        if timeline.enabled():
            timeline.write(self.rank, self.size, self.teams)

    def close(self) -> None:
        """Free everything this session holds; safe after a partial __init__."""
        framework, self.backend = self.backend, None
        try:
            if framework is not None:
                framework.close()  # before the teams go: their operations must fail cleanly
        finally:
            if hasattr(self, "weights"):
                self.weights.handles = []  # the teams go: a stale compiled step must not count
            for team in self.teams:
                lib.mlc_team_destroy(team)
            self.teams = []
            self.team_ids = []
            if self.ctx != ffi.NULL:
                lib.mlc_context_destroy(self.ctx)
                self.ctx = ffi.NULL
            if self.departure is not None:
                self.departure.close()
                self.departure = None
            if self.barrier is not None:
                self.barrier.close()
                self.barrier = None
