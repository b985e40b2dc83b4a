"""Where each team's caller stands: the identity that the core signs with every request a
Python call makes (csrc/team/calls.c, mlc_team_begin_call).

A call of the NumPy-level API on a team carries (step, place, thread):
- with steps marked (`ml_comm.step(n)`): the step's number and the call's place among the
  step's calls on that team; a rank that left a step early (an exception) or skipped a
  call is found at its next call, on every rank, and the ranks realign;
- without: step 0 and the call's place among the team's calls, counted on entry, so that a
  call that raised on one rank before it reached the others is found at the next;
- the calling thread's name: two threads that drive one team, in another order on another
  rank, fail instead of pairing their calls. One thread at a time drives a team: a second
  thread that calls while the first is inside a call on it raises at once.

Requests that a framework's ops submit from their own threads carry no identity, but for
a pipelined team's op, which carries its step where steps are counted (the TensorFlow op:
mlc_team_allreduce_async_at).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .._core import ffi, lib
from .errors import BadArgumentError, StateError
from .status import ERR_LEN, error, text


def _origin(thread: threading.Thread) -> tuple[int, bytes]:
    """A digest of the thread's name, the same on every rank for threads created alike;
    0 for threads Python did not start (a framework's), whose names say nothing."""
    if isinstance(thread, threading._DummyThread):
        return 0, b""
    name = thread.name.encode(errors="replace")
    # 30 bits: one digit of Python's int, which C reads without PyLong's general path.
    return zlib.crc32(name) & 0x3FFFFFFF or 1, name


class _Thread(threading.local):
    """Per thread: the step it marked (0: none), the last it marked, and its name as calls
    carry it (made again only when the thread is renamed)."""

    step = 0
    last_step = 0

    def __init__(self, publishers: list) -> None:
        self.publishers = publishers  # the same list on every thread: Calls.publish_with's
        self.thread = threading.current_thread()
        self.named = None
        self.origin, self.name, self.name_bytes = 0, ffi.NULL, b""
        self.err = ffi.new(f"char[{ERR_LEN}]")
        # (step, origin, name bytes), kept up to date: an 8-byte call takes about a
        # microsecond. `current` holds (thread, named, signed) for the fast paths, which
        # read one attribute of this thread-local object instead of three.
        self.signed = (0, 0, b"")
        self.current = (self.thread, self.named, self.signed)

    def identity(self) -> tuple[int, object]:
        # Renamed: made again (for an equal new name too, as the fast paths compare objects).
        if self.thread.name is not self.named:
            self.named = self.thread.name
            origin, name = _origin(self.thread)
            self.origin, self.name, self.name_bytes = origin, ffi.new("char[]", name), name
            self.sign((self.step, origin, name))
        return self.origin, self.name

    def mark(self, step: int) -> None:
        self.step = step
        self.sign((step, self.origin, self.name_bytes))

    def sign(self, signed: tuple[int, int, bytes]) -> None:
        self.signed = signed
        self.current = (self.thread, self.named, signed)
        for publish in self.publishers:
            publish(self, self.current)


class Calls:
    def __init__(self) -> None:
        self._publishers: list = []
        self._thread = _Thread(self._publishers)
        # The same per-thread state, for the one-array fast paths (arrays/numpy_backend.py),
        # which read its `current` without a call.
        self.thread_state = self._thread
        # Run with the team's id before each call that `calling` begins: a framework whose
        # steps run after the call that dispatched them returned (JAX) lets them run first,
        # so that their requests come before this call's on every rank.
        self.before_call: Callable[[int], None] | None = None

    def publish_with(self, publish) -> None:
        """Hand every change of a thread's `current` to publish(thread_state, current), on
        that thread: for a fast path that keeps it where it reads it faster than from
        thread_state (arrays/_numpy_glue.c, which takes the first one itself)."""
        self._publishers.append(publish)

    @contextmanager
    def step(self, number: int | None) -> Iterator[int]:
        """Mark the calling thread's calls inside the block as step `number` (None: the
        thread's previous step + 1)."""
        mine = self._thread
        if number is None:
            number = mine.last_step + 1
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise BadArgumentError(f"step: the step number must be an int >= 1, got {number!r}")
        if mine.step:
            raise StateError(f"step({number}) inside step({mine.step}): steps do not nest")
        mine.mark(number)
        mine.last_step = number
        try:
            yield number
        finally:
            mine.mark(0)

    def identity(self) -> tuple[int, int, bytes]:
        """The calling thread's (step, origin, name) for a call that C code begins itself
        (mlc_team_begin_call's arguments; C reads the name up to a NUL, as the char[] one)."""
        thread, named, signed = self._thread.current
        if thread._name is not named:  # renamed (Thread.name is a property around _name)
            self._thread.identity()
            return self._thread.signed
        return signed

    def calling(self, team: int, handle, kind: int | None = None, named: bool = True) -> _Call:
        """One call on `team` (its handle), as a `with` block: counted, refused while another
        thread is inside a call on it, and signed with where this thread stands. kind: the
        core's MLC_KIND_* of a call whose exception, raised before any request of it, is
        told to the other ranks' matching call (mlc_team_refuse_call); None: not told.
        named=False: signed without the thread's name, for a framework's hook that runs on
        whichever thread the framework runs it (DDP's)."""
        if self.before_call is not None:
            self.before_call(team)
        return _Call(self._thread, team, handle, kind, named)

    @contextmanager
    def failing(self, team: int, handle, kind: int) -> Iterator[None]:
        """A block that makes no call unless an Exception leaves it: then it is this
        thread's call on `team`, which the core counts and refuses as `calling` does (for a
        front end that checks its arguments before it hands the call to code that makes
        it, perhaps later: a traced step's callback)."""
        try:
            yield
        except Exception:
            with self.calling(team, handle, kind):
                raise

    @staticmethod
    def forget(handle) -> None:
        """The calling thread's call raised an earlier call's failure (a pipelined team's
        reduction in flight) before it submitted anything: it takes no place."""
        lib.mlc_team_forget_call(handle)

    def marked_step(self) -> int:
        """The step the calling thread marked (ml_comm.step; 0: none)."""
        return self._thread.step


class _Call:
    """Calls.calling's block: a class with two calls into the core, not a generator, for a
    call of 8 bytes takes a few microseconds in all."""

    __slots__ = ("mine", "team", "handle", "kind", "named")

    def __init__(self, mine: _Thread, team: int, handle, kind: int | None, named: bool) -> None:
        self.mine, self.team, self.handle, self.kind = mine, team, handle, kind
        self.named = named

    def __enter__(self) -> None:
        mine = self.mine
        origin, name = mine.identity() if self.named else (0, ffi.NULL)
        rc = lib.mlc_team_begin_call(self.handle, mine.step, origin, name, mine.err, ERR_LEN)
        if rc:
            raise error(rc, text(mine.err))

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc is not None and self.kind is not None and isinstance(exc, Exception):
                # Raised here before the call made a request (an argument that this rank
                # alone may find wrong): the others' matching call fails, naming it,
                # instead of waiting for a request that this rank never makes.
                _refuse(self.handle, self.kind, exc, self.mine.err)
        finally:
            lib.mlc_team_end_call(self.handle)
        return False


def _refuse(handle, kind: int, exc: Exception, err) -> None:
    """Tell the others' matching request that this rank's call raised `exc` before it made
    one (the core sends nothing where it did): they fail naming this rank and why."""
    bad = isinstance(exc, BadArgumentError)
    refusal = getattr(lib, exc.refusal) if bad else lib.MLC_REFUSED_RAISED
    tensor = exc.tensor if bad else -1
    lib.mlc_team_refuse_call(handle, kind, tensor, refusal, err, ERR_LEN)


@contextmanager
def waiting_on(handle, alive: Callable[[], bool] | None = None) -> Iterator[None]:
    """This thread waits for ops of a framework on the team (an eager op, a Keras step):
    the core completes them by callback, on its own threads, so it counts this rank as
    blocked inside ml_comm only when told (mlc_team_caller_waits), for its deadlock check:
    two teams called in another order on another rank then end the job naming each
    rank's wait, as blocking calls do, instead of waiting for the stall abort. alive: whether
    the team still exists at the end (a finalize inside a Keras fit frees it)."""
    lib.mlc_team_caller_waits(handle, 1)
    try:
        yield
    finally:
        if alive is None or alive():
            lib.mlc_team_caller_waits(handle, -1)


@contextmanager
def refusing(handle, kind: int) -> Iterator[None]:
    """For a framework's front end, whose ops' requests carry no identity: an Exception
    raised in the block, where the call checks its arguments before it builds any op, is
    told to the other ranks' matching request (as Calls.calling does for the NumPy API)
    instead of leaving them waiting for an op this rank never runs. At trace time too:
    the others' traced ops meet the refusal when they run."""
    try:
        yield
    except Exception as exc:
        _refuse(handle, kind, exc, ffi.new(f"char[{ERR_LEN}]"))
        raise
