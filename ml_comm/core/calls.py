"""Where each team's caller stands: the call identity that the core signs with every request
a Python call makes (csrc/include/ml_comm.h, mlc_team_set_call).

A call of the NumPy-level API on a team carries (step, index, thread):
- with steps marked (`ml_comm.step(n)`): the step's number and the call's place among the
  step's calls on that team; a rank that left a step early (an exception) or skipped a
  call is found at its next call, on every rank, and the ranks realign;
- without: step 0 and the call's place among all of the team's calls, counted on entry, so
  that a call that raised on one rank before it reached the others is found at the next;
- the calling thread's name: two threads that drive one team, in another order on another
  rank, fail instead of pairing their calls. One thread at a time drives a team: a second
  thread that calls while the first is inside a call raises at once.

Requests that a framework's ops submit from its own threads carry no identity.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from .._core import lib
from .errors import MLCommError


class _Marked(threading.local):
    """The step this thread marked (0: none) and its calls per team so far."""

    step = 0
    index: dict[int, int]

    def __init__(self) -> None:
        self.index = {}


def _origin(thread: threading.Thread) -> tuple[int, bytes]:
    """A digest of the thread's name, the same on every rank for threads created alike;
    0 for threads Python did not start (a framework's), whose names say nothing."""
    if isinstance(thread, threading._DummyThread):
        return 0, b""
    name = thread.name.encode(errors="replace")
    return zlib.crc32(name) or 1, name


class Calls:
    def __init__(self, nteams: int) -> None:
        self._lock = threading.Lock()
        self._inside: dict[int, threading.Thread] = {}
        self._counts = [0] * nteams
        self._marked = _Marked()
        self.last_step: dict[int, int] = {}  # per thread ident: the last step it marked

    @contextmanager
    def step(self, number: int | None) -> Iterator[int]:
        """Mark the calling thread's calls inside the block as step `number` (None: the
        thread's previous step + 1)."""
        ident = threading.get_ident()
        if number is None:
            number = self.last_step.get(ident, 0) + 1
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"step: the step number must be an int >= 1, got {number!r}")
        if self._marked.step:
            raise MLCommError(f"step({number}) inside step({self._marked.step}): steps do not nest")
        self._marked.step, self._marked.index = number, {}
        self.last_step[ident] = number
        try:
            yield number
        finally:
            self._marked.step, self._marked.index = 0, {}

    @contextmanager
    def calling(self, team: int, handle) -> Iterator[None]:
        """One call on `team` (its handle): counted, refused while another thread is inside
        a call on it, and signed with where this thread stands."""
        thread = threading.current_thread()
        marked = self._marked
        with self._lock:
            # Counted first: a call refused here is one the other ranks may have made. Calls
            # of marked steps count apart, so that ranks realigned there stay aligned here.
            if marked.step:
                index = marked.index.get(team, 0)
                marked.index[team] = index + 1
            else:
                self._counts[team] += 1
                index = self._counts[team]
            inside = self._inside.get(team)
            if inside is not None and inside is not thread:
                raise MLCommError(
                    f"team {team} is in use by thread {inside.name!r} on this rank: one thread "
                    f"at a time drives a team (thread {thread.name!r} needs a team of its own: "
                    "init(nteams=...))"
                )
            nested = inside is thread
            self._inside[team] = thread
        if nested:
            yield
            return
        origin, name = _origin(thread)
        try:
            lib.mlc_team_set_call(handle, marked.step, index, origin, name)
            yield
        finally:
            lib.mlc_team_clear_call(handle)
            with self._lock:
                del self._inside[team]

    def forget(self, team: int) -> None:
        """The calling thread's call on `team` raised an earlier call's failure (a pipelined
        team's reduction in flight) before it submitted anything: it takes no place, as on
        a synchronous rank, where the same failure ended the earlier call itself."""
        marked = self._marked
        with self._lock:
            if marked.step:
                marked.index[team] = max(marked.index.get(team, 1) - 1, 0)
            else:
                self._counts[team] -= 1
