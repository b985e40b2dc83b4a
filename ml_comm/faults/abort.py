"""A rank that fails or leaves early ends the whole job instead of hanging it.

Three mechanisms, all only when the job has more than one rank:

* An uncaught exception, in the main thread or any other: `init` chains a hook in
  front of sys.excepthook and threading.excepthook that prints the traceback under
  the rank's name and calls MPI_Abort, so that mpiexec / srun end every rank at
  once. Without it the failing rank would stop in MPI_Finalize, waiting for the
  others, while the others wait for it in their next reduction: a hang; a thread
  that dies leaves its work undone (a data loader that stops feeding the step, a
  GAN's second model that never reduces again). Opt out with
  ML_COMM_ABORT_ON_EXCEPTION=0.
* Leaving while others wait (finalize(), sys.exit(), the end of the script): the
  leaving rank waits for the others in a barrier, and while it waits it looks for
  a peer that has already sent it a message of a team operation that it never
  made (csrc/team/departure.c). Such a peer would wait forever, so the job is aborted
  with a message that names it. A peer that is merely busy (rank 0 saving a
  checkpoint) is waited for, as MPI_Finalize would.
* The launcher dying: a rank whose parent process (hydra's proxy, slurmstepd)
  goes away, so that nobody is left to end it, exits instead of waiting for its
  peers forever as an orphan (a thread checks the parent's pid twice a second).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable

from ..core import settings
from ..core.job_errors import ranks_raising
from ..core.output import say

ENV_ABORT_ON_EXCEPTION = "ML_COMM_ABORT_ON_EXCEPTION"
ABORT_CODE = 1

# How often a rank checks that the process that started it is still there.
_PARENT_POLL_SECONDS = 0.5
_FORWARD_GRACE_SECONDS = 0.3
# How long a rank whose exception a lower rank prints for the job waits for that rank to
# end the job before it prints the exception itself (that rank may have caught it).
_SHARED_WAIT_SECONDS = 10.0
_TF_WRAPPER = re.compile(r"\{\{function_node [^{}]*\}\} ?")

_installed = False
_watching = False
# Says how far this rank's training got ("rank 1 ran 10 training steps on team 0"), for
# the messages of a rank that leaves or waits while a peer waits for it (a front end
# registers it with set_steps_note: ranks that ran different numbers of steps are the
# usual cause).
_steps_note: Callable[[], str] | None = None


def set_steps_note(note: Callable[[], str] | None) -> None:
    """Register the function that says how far this rank's training got (None: none)."""
    global _steps_note
    _steps_note = note


def steps_text() -> str:
    """The registered note, with a leading space, or "" (also when the note fails)."""
    try:
        text = _steps_note() if _steps_note is not None else ""
    except Exception:  # noqa: BLE001 - a note must never stop an abort
        text = ""
    return f" {text}" if text else ""


def abort_on_exception_enabled() -> bool:
    return settings.get(ENV_ABORT_ON_EXCEPTION)


def _world():
    """mpi4py's COMM_WORLD when MPI is running with more than one rank, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    world = mpi.COMM_WORLD
    return world if world.Get_size() > 1 else None


def abort(message: str = "") -> None:
    """Print `message` (if any) and end every rank of the job (MPI_Abort on COMM_WORLD)."""
    if message:
        say(message)
    world = _world()
    if world is not None:
        # The launcher kills every rank as soon as it hears of the abort, and output
        # still in its forwarding pipes is lost with them (a fresh-clone test run once
        # got an empty stderr): give it a moment to pass the message on first.
        time.sleep(_FORWARD_GRACE_SECONDS)
        world.Abort(ABORT_CODE)
    # MPICH's MPI_Abort can return once it has told the launcher, which then kills
    # the ranks: nothing more of this process may run meanwhile (atexit handlers).
    os._exit(ABORT_CODE)


def _traceback_text(exc_type, exc, tb) -> str:
    """The traceback as Python prints it, less the name of the TensorFlow function an
    op failed in ("{{function_node __wrapped__...}}"), which repeats nothing of use."""
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    return _TF_WRAPPER.sub("", text)


def _abort_after(exc_type, exc, tb, where: str, show, default_show: bool) -> None:
    """Print the rank's name and the traceback, then end the job. The traceback goes
    through `show`, the hook chained before ours, unless that is Python's own: then it is
    written here in one piece, so that no other rank's output lands inside it. An
    exception that every rank raises alike (core/job_errors.py) is printed only by the
    lowest of them; the others say so in one line and wait for it to end the job."""
    world = _world()
    rank, size = world.Get_rank(), world.Get_size()
    shared = ranks_raising(exc)
    if rank in shared and rank != min(shared):
        say(
            f"ml_comm: rank {rank} of {size}: uncaught {exc_type.__name__}{where}, the same as "
            f"rank {min(shared)}'s, which prints it and ends the job"
        )
        time.sleep(_SHARED_WAIT_SECONDS)  # normally ended meanwhile by that rank's abort
    banner = (
        f"ml_comm: rank {rank} of {size}: uncaught {exc_type.__name__}{where}; "
        "aborting the job (MPI_Abort) so that the other ranks do not wait for this one "
        f"forever ({ENV_ABORT_ON_EXCEPTION}=0 turns this off)"
    )
    try:
        if default_show:
            say(banner + "\n" + _traceback_text(exc_type, exc, tb))
        else:
            say(banner)
            show()
    except BaseException:  # noqa: BLE001 - a broken hook must not stop the abort
        traceback.print_exception(exc_type, exc, tb)
    abort()


def _wants_abort() -> bool:
    return _world() is not None and abort_on_exception_enabled()


def _excepthook(previous):
    def hook(exc_type, exc, tb):
        if not _wants_abort():
            previous(exc_type, exc, tb)
            return
        show = lambda: previous(exc_type, exc, tb)  # noqa: E731
        _abort_after(exc_type, exc, tb, "", show, previous is sys.__excepthook__)

    return hook


def _thread_excepthook(previous):
    def hook(args):
        # SystemExit in a thread only ends that thread, by Python's own rules.
        if args.exc_type is SystemExit or not _wants_abort():
            previous(args)
            return
        name = args.thread.name if args.thread is not None else "?"
        _abort_after(
            args.exc_type,
            args.exc_value,
            args.exc_traceback,
            f" in thread {name!r}",
            lambda: previous(args),
            previous is threading.__excepthook__,
        )

    return hook


def install_excepthook() -> None:
    """Chain ml_comm's hooks in front of sys.excepthook and threading.excepthook, once
    per process."""
    global _installed
    if _installed:
        return
    sys.excepthook = _excepthook(sys.excepthook)
    threading.excepthook = _thread_excepthook(threading.excepthook)
    _installed = True


def watch_launcher() -> None:
    """Exit this rank if its parent process goes away (once per process).

    A launcher that dies before it has killed its ranks (SIGKILL of mpiexec's
    proxy, a race in its clean-up under load) leaves them reparented to init,
    spinning in a reduction whose peer is gone. The parent's pid changing is the
    sign: no launcher restarts a rank under another parent.
    """
    global _watching
    if _watching:
        return
    _watching = True
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_SECONDS)
        try:  # the launcher carried our stderr: it may lead nowhere now
            world = _world()
            rank = f"rank {world.Get_rank()}" if world is not None else f"pid {os.getpid()}"
            say(
                f"ml_comm: {rank}: the process that launched it (pid {parent}) is gone; "
                "exiting rather than waiting for the other ranks forever"
            )
        finally:
            os._exit(ABORT_CODE)

    threading.Thread(target=watch, name="ml_comm-launcher-watch", daemon=True).start()
