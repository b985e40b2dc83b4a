"""Stopping every rank at the same step: on a signal (a Slurm time limit, preemption)
or when the program asks.

    mc.catch_stop_signals()            # SIGTERM, SIGINT, SIGUSR1, SIGUSR2 by default
    for step in range(steps):
        grads = mc.gradients(compute_gradients(), 0)
        ...
        if mc.should_stop():           # the same answer on every rank, after every step
            save_checkpoint_on_rank_0()
            break

A rank that receives a signal (or calls `request_stop()`) sets a flag in the core
(`mlc_team_request_stop`, one atomic store, on every team). The flag rides in the
agreement check's signature that every request already exchanges (csrc/agree/signature.c),
so no message of its own is sent; every rank's verdict on the first request whose
signatures carry it marks that request and the team the same way. `should_stop()`
reads that mark at a point where every rank has the same verdicts: after a
synchronous step, every request of the team up to the one just waited for has been
judged on every rank, and no later one exists yet. A pipelined NumPy team has a
reduction in flight behind the step whose verdict may be known on one rank and not
yet on another, so there the answer comes from the requests that this rank has
waited for (`note_request`), which are the same on every rank. A pipelined
TensorFlow team has no such point: `should_stop` refuses it.

Needs the agreement check (ML_COMM_CHECK_LAYOUT=1, the default) at more than one
rank: without the exchange nothing carries the flag, and `catch_stop_signals` and
`should_stop` raise rather than let the ranks stop at different steps. At one rank
the answer is the rank's own flag.
"""

from __future__ import annotations

import signal
import sys
import threading

from .._core import lib
from ..core.errors import StateError
from ..core.session import is_pipelined
from .abort import _world

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)

_asked = False  # this rank asked (a signal or request_stop)
_received: list[str] = []  # names of the signals received, for messages
_agreed_teams: set[int] = set()  # pipelined NumPy teams whose waited requests said "stop"
_local = threading.local()  # this thread waited for a request that said "stop"
_previous_handlers: dict[int, object] = {}  # restored at finalize
_signalled = None  # the session whose teams a caught signal flags (until finalize)


def request_stop(session) -> None:
    """Ask every rank to stop: from now on this rank's requests on every team of
    `session` (None before init) carry the flag; every rank's `should_stop()` turns true
    after the same step. Safe to call from a signal handler, and more than once."""
    global _asked
    _asked = True
    if session is not None:
        for team in session.teams:
            lib.mlc_team_request_stop(team)


def _handler(signum, frame) -> None:
    name = signal.Signals(signum).name
    if signum == signal.SIGINT and name in _received:
        raise KeyboardInterrupt  # Ctrl-C twice: interrupt this rank as Python would
    first = not _received
    _received.append(name)
    session = _signalled
    request_stop(session)
    if first:
        print(
            f"ml_comm: rank {_rank(session)}: received {name}; every rank stops after the step in "
            "which they all learn of it",
            file=sys.stderr,
            flush=True,
        )


def _rank(session) -> int | str:
    if session is not None:
        return session.rank
    world = _world()
    return world.Get_rank() if world is not None else "?"


def _require_exchange(session, what: str) -> None:
    if session.size > 1 and not session.guard.layout:
        raise StateError(
            f"{what}: stopping every rank at the same step needs the agreement check, whose "
            "messages carry the stop request, but ML_COMM_CHECK_LAYOUT=0 turned it off; "
            "unset it (or set it to 1) on every rank"
        )


def catch_stop_signals(session, signals=DEFAULT_SIGNALS) -> None:
    """Make each of `signals` (received by any rank) ask every rank to stop, instead of
    ending the process; the program ends its loop when `should_stop()` says so. Call
    after `init`, from the main thread."""
    global _signalled
    _require_exchange(session, "catch_stop_signals")
    _signalled = session
    for sig in signals:
        previous = signal.signal(sig, _handler)
        _previous_handlers.setdefault(sig, previous)
    if _asked:  # a stop asked before the teams existed
        request_stop(session)


def received_signals() -> list[str]:
    """Names of the signals this rank received since `catch_stop_signals`."""
    return list(_received)


def should_stop(session, team: int = 0) -> bool:
    """True on every rank after the same step, once any rank asked to stop (a signal
    caught by `catch_stop_signals`, or `request_stop`). Call it between steps, on the
    thread that drives the team, at the same point on every rank."""
    handle = session.team(team)
    if session.size == 1:
        return _asked
    _require_exchange(session, "should_stop")
    config = session.configs[team]
    if not is_pipelined(config.ksteps, config.max_steps):
        return lib.mlc_team_stop_seq(handle) >= 0
    if session.backend.name == "tensorflow":
        raise StateError(
            f"should_stop: team {team} is pipelined (config_team ksteps < max_steps) with "
            "TensorFlow ops, whose reduction in flight may have told one rank and not yet "
            "another; use a synchronous team for the step that decides"
        )
    return team in _agreed_teams


def team_is_pipelined(session, team: int) -> bool:
    config = session.configs[team]
    return is_pipelined(config.ksteps, config.max_steps)


def agreed_after_blocking_call(session, team: int = 0) -> bool:
    """`should_stop` for the moment right after a blocking call on the team (`average`,
    `allreduce_sum`, `broadcast`) returned on the thread that drives it: every request
    up to that call has its verdict on every rank (verdicts come in queue order) and no
    later one exists, so the team's mark is the same everywhere, pipelined or not.
    Keras' per-batch MetricAverage gives `fit` such a moment after every batch."""
    handle = session.team(team)
    if session.size == 1:
        return _asked
    _require_exchange(session, "should_stop")
    return lib.mlc_team_stop_seq(handle) >= 0


def note_request(req) -> None:
    """A request this thread has waited for (before it is freed)."""
    if lib.mlc_request_stop_asked(req):
        _local.seen = True


def note_call(team: int) -> None:
    """End of a NumPy gradients call on `team`: attribute what its waits saw."""
    if getattr(_local, "seen", False):
        _agreed_teams.add(team)
        _local.seen = False


def caught_signals() -> frozenset[int]:
    """The signals catch_stop_signals holds now."""
    return frozenset(_previous_handlers)


def release_stop_signals(keep: frozenset[int] = frozenset()) -> None:
    """The signals, but those in `keep`, get their handlers from before
    catch_stop_signals back: such a signal ends the process again (a stop already asked
    stays asked). Main thread only, as Python's signal.signal is."""
    if threading.current_thread() is threading.main_thread():
        for sig in [s for s in _previous_handlers if s not in keep]:
            signal.signal(sig, _previous_handlers.pop(sig))


def deliver_again(names: list[str], keep: frozenset[int]) -> None:
    """Signals caught while nothing acted on them any more (after a fit's last check):
    the first not in `keep` is raised again, to the handler it has now (released: what
    it would have done without ml_comm; Ctrl-C's KeyboardInterrupt)."""
    for name in names:
        sig = signal.Signals[name]
        if sig not in keep:
            signal.raise_signal(sig)
            return


def forget() -> None:
    """finalize: the signals get their handlers from before catch_stop_signals back (a
    signal after finalize ends the process again), and the session's stop state goes."""
    global _asked, _signalled
    _signalled = None
    release_stop_signals()
    _asked = False
    _received.clear()
    _agreed_teams.clear()
    _local.seen = False
