"""A small data-parallel training loop in which one rank fails or leaves on purpose.

    mpiexec -n N python faulty_training.py MODE VICTIM TOKEN

MODE (what rank VICTIM does at step FAULT_STEP, while the other ranks are in, or
about to enter, gradients()):
  kill             SIGKILL itself
  raise            raise an uncaught exception
  thread_raise     start a thread that raises an uncaught exception (the main thread
                   goes on training for a minute unless the job is ended)
  exit             sys.exit(0) without finalize
  finalize_exit    finalize() then sys.exit(0)
  raise_finally    raise an exception inside the loop's `try: ... finally: finalize()`
  long             no fault: train for a long time (the test kills the launcher)
Modes in which every rank ends well (exit status 0):
  no_finalize      every rank ends the script without finalize (atexit does it)
  finalize_twice   every rank calls finalize() twice, then atexit runs it again
  busy_peer        rank VICTIM "saves a checkpoint" (sleeps) before it finishes,
                   while the others have already left without finalize
TOKEN is only there so that the test can find this job's processes in /proc.
Every rank prints "started rank R pid P" first and "done rank R" at its end.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

import ml_comm as mc

FAULT_STEP = 20
STEPS = 400  # the fault ends the job long before; the bound keeps a broken test finite
CLEAN_STEPS = 30
LONG_STEPS = 12000  # a minute or more
BUSY_SECONDS = 3.0


def _fail(rank: int, step: int) -> None:
    raise RuntimeError(f"injected failure in a thread of rank {rank} at step {step}")


def main() -> int:
    mode, victim = sys.argv[1], int(sys.argv[2])
    mc.init(1, 1, 4096, chunk_bytes=1024)
    rank, n = mc.get_rank(), mc.get_nranks()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    weights = np.zeros(3000, np.float32)
    mc.broadcast([weights])  # every rank starts from rank 0's weights
    steps = STEPS if mode in ("kill", "raise", "exit", "finalize_exit") else CLEAN_STEPS
    if mode in ("long", "thread_raise"):
        steps = LONG_STEPS
    if mode == "raise_finally":
        try:
            return train(mode, victim, rank, n, weights, STEPS)
        finally:
            mc.finalize()  # as a script's cleanup would: the exception is on its way out
    return train(mode, victim, rank, n, weights, steps)


def train(mode: str, victim: int, rank: int, n: int, weights, steps: int) -> int:
    for step in range(steps):
        if rank == victim and step == FAULT_STEP:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode in ("raise", "raise_finally"):
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            elif mode == "thread_raise":
                threading.Thread(target=_fail, args=(rank, step), name="loader").start()
            elif mode == "exit":
                sys.exit(0)
            elif mode == "finalize_exit":
                mc.finalize()
                sys.exit(0)
        grad = np.full(weights.shape, rank + step, np.float32)
        (avg,) = mc.gradients([grad])
        want = np.float32(sum(r + step for r in range(n))) / np.float32(n)
        if not np.all(avg == want):
            print(f"rank {rank}: wrong average at step {step}", file=sys.stderr, flush=True)
            return 3
        weights -= avg
        time.sleep(0.005)
    if mode == "finalize_twice":
        mc.finalize()
        mc.finalize()
    if mode == "busy_peer" and rank == victim:
        time.sleep(BUSY_SECONDS)  # e.g. writing a checkpoint, not in any ml_comm call
    print(f"done rank {rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
