"""The failure paths at many ranks (34 and 64: past the 64 requests an MPI call once tested at
a time, and its 2 (n - 1) of the agreement's table), one after another in one job.

    mpiexec -n N python scale_job.py MODE ODD TOKEN

ODD is the rank that does something wrong; every rank prints "rank R CASE: ok" or
"rank R CASE: FAILED <why>", and "done rank R" at the end. MODE:
  failures     each case, then the job trains on and exits 0:
                 mismatch     ODD averages one element more: every rank raises, naming it
                 nonfinite    ODD's gradient 1 holds NaN (ML_COMM_CHECK_FINITE=1): named
                 splits       ODD's alltoall splits overflow int64 to its rows: refused
                 ahead        large allgathers (their first piece goes ahead of the check),
                              ODD's rows of another shape: every rank raises, none hangs
                 left_step    ODD leaves step 2 before its first call (an exception): the
                              others raise at step 2 naming it, step 3 on is exact
                 mid_step     ODD raises between the two calls of step 4: the others raise
                              at its second call, step 5 on is exact
                 refused      no steps marked: ODD's average, then its allgather, refuses
                              an argument: the others' fail at once naming it
                 skipped      no steps marked: ODD's allgather is interrupted (no Exception:
                              not told) before it reaches the others; theirs raises at
                              ODD's next call, naming it, the next call is exact
  cross_order  ranks below ODD average on team 0 then team 1, the others the other way
               round: the deadlock check ends the job (ML_COMM_DEADLOCK_SECONDS)
TOKEN is only there so that the test can find this job's processes in /proc.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")


class Boom(Exception):
    pass


class Interrupted(BaseException):
    """What a KeyboardInterrupt is to a call: no Exception, so the call is not told."""


def interrupted(*args, **kwargs):
    raise Interrupted


def values(rank: int, count: int, seed: int) -> np.ndarray:
    """Integer-valued, so that every average over the ranks is exact."""
    return (((np.arange(count) * 7 + rank * 3 + seed * 5) % 11) - 5).astype(np.float32)


def average_of(n: int, count: int, seed: int) -> np.ndarray:
    return (sum(values(r, count, seed).astype(np.float64) for r in range(n)) / n).astype(np.float32)


class Job:
    def __init__(self, odd: int) -> None:
        self.rank, self.n, self.odd = mc.get_rank(), mc.get_nranks(), odd
        self.others = self.ranks_text([r for r in range(self.n) if r != odd])

    @staticmethod
    def ranks_text(ranks: list[int]) -> str:
        """ "ranks 0-16, 18-33", as the core's messages group them."""
        parts, start = [], ranks[0]
        for a, b in zip(ranks, ranks[1:] + [None]):
            if b != a + 1:
                parts.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)

    def report(self, case: str, problems: list[str]) -> None:
        status = "ok" if not problems else "FAILED " + " | ".join(problems)
        print(f"rank {self.rank} {case}: {status}", flush=True)

    def exact_gradients(self, seed: int, problems: list[str], what: str) -> None:
        out = mc.gradients([values(self.rank, 5, seed), values(self.rank, 300, seed + 1)])
        for k, count in enumerate((5, 300)):
            if out[k].tobytes() != average_of(self.n, count, seed + k).tobytes():
                problems.append(f"{what}: gradient {k} is not the exact average")

    def raises(self, problems: list[str], call, *words: str) -> str:
        try:
            call()
        except (mc.MLCommError, ValueError) as e:  # bad arguments are ValueErrors too
            text = str(e)
            problems.extend(f"message lacks {w!r}: {text[:300]!r}" for w in words if w not in text)
            return text
        problems.append("did not raise")
        return ""

    def mismatch(self) -> list[str]:
        problems: list[str] = []
        count = 10 + (self.rank == self.odd)
        self.raises(
            problems,
            lambda: mc.average(np.ones(count, np.float32)),
            f"rank {self.odd} submitted 1 tensor, 11 float32 elements",
            f"{self.others} submitted 1 tensor, 10 float32 elements",
        )
        self.exact_gradients(1, problems, "after")
        return problems

    def nonfinite(self) -> list[str]:
        problems: list[str] = []
        grads = [values(self.rank, 5, 2), values(self.rank, 300, 3)]
        if self.rank == self.odd:
            grads[1][7] = np.nan
        self.raises(problems, lambda: mc.gradients(grads), f"rank {self.odd} gradients[1]")
        self.exact_gradients(4, problems, "after")
        return problems

    def splits(self) -> list[str]:
        problems: list[str] = []
        n, rows = self.n, self.n
        splits = [1] * n
        if self.rank == self.odd:  # their int64 sum wraps around to the input's 6 rows
            rows, splits = 6, [2**63 - 1, 2**63 - 1, 8] + [0] * (n - 3)
        self.raises(
            problems,
            lambda: mc.alltoall(np.ones((rows, 2), np.int32), splits=splits),
            f"rank {self.odd}: splits add up to more than 2^63-1 rows",
        )
        out, counts = mc.alltoall(np.full((n, 2), self.rank, np.int32))
        if out[:, 0].tolist() != list(range(n)) or counts.tolist() != [1] * n:
            problems.append("the alltoall after is wrong")
        return problems

    def ahead(self) -> list[str]:
        problems: list[str] = []
        shape = (300, 100, 3) if self.rank == self.odd else (300, 300)
        x = np.ones(shape, np.float32)
        self.raises(problems, lambda: mc.allgather(x), f"rank {self.odd} submitted")
        out = mc.allgather(np.full((200 + self.rank % 3, 100), self.rank, np.float32))
        want = np.concatenate([np.full((200 + r % 3, 100), r, np.float32) for r in range(self.n)])
        if out.tobytes() != want.tobytes():
            problems.append("the large allgather after is wrong")
        return problems

    def two_call_step(self, i: int, fail_before: int | None) -> tuple[str, str]:
        """Step i's two calls; raise Boom before call `fail_before`. ("", "") when exact."""
        try:
            with mc.step(i):
                for call in range(2):
                    if call == fail_before:
                        raise Boom()
                    seed = 10 * i + call
                    out = mc.gradients([values(self.rank, 40, seed)])
                    if out[0].tobytes() != average_of(self.n, 40, seed).tobytes():
                        return "wrong", f"step {i} call {call}"
        except Boom:
            return "boom", ""
        except mc.MLCommError as e:
            return "raised", str(e)
        return "", ""

    def steps(self, failing_step: int, call: int) -> list[str]:
        problems: list[str] = []
        for i in range(failing_step - 1, failing_step + 2):
            fail = call if (self.rank == self.odd and i == failing_step) else None
            kind, text = self.two_call_step(i, fail)
            if i != failing_step:
                if kind:
                    problems.append(f"step {i}: {kind} {text[:200]}")
            elif self.rank == self.odd:
                if kind != "boom":
                    problems.append(f"step {i}: {kind} {text[:200]}")
            else:
                want = (
                    f"rank {self.odd} is at step {i + 1}, call 0 on this team, this rank at "
                    f"step {i}, call {call} (1 step behind)"
                )
                if kind != "raised" or want not in text:
                    problems.append(f"step {i}: {kind} {text[:300]!r}")
        return problems

    def raised_on_one_rank(self, call: str, interrupt: bool = False) -> list[str]:
        """Call 1 raises on the odd rank before it reaches the others. An argument only it
        finds wrong is refused there (every other rank fails at once, told why); an
        interruption is not told, and is found at the odd rank's next call, which counts
        it ahead."""
        from ml_comm.arrays import collectives

        problems: list[str] = []
        told = (
            f"rank {self.odd} is at call"
            if interrupt
            else f"rank {self.odd}: an argument has a dtype the call does not take"
        )
        for k in range(3):
            wrong = self.rank == self.odd and k == 1
            arg = np.array(["x"]) if wrong and not interrupt else values(self.rank, 6, k)
            read = collectives._input
            if wrong and interrupt:
                collectives._input = interrupted  # as Ctrl-C would, while it reads its input
            try:
                if call == "average":
                    out, want = mc.average(arg), average_of(self.n, 6, k)
                else:
                    out = mc.allgather(arg)
                    want = np.concatenate([values(r, 6, k) for r in range(self.n)])
                if k == 1 and self.rank != self.odd:
                    problems.append("call 1 did not raise")
                elif out.tobytes() != want.tobytes():
                    problems.append(f"call {k} is not exact")
            except (TypeError, mc.MLCommError, Interrupted) as e:
                if k != 1:
                    problems.append(f"call {k} raised {e!r}")
                elif self.rank != self.odd and told not in str(e):
                    problems.append(f"call 1 does not say {told!r}: {e}")
            finally:
                collectives._input = read
        return problems


def main() -> int:
    mode, odd = sys.argv[1], int(sys.argv[2])
    mc.init(2, 2, 4096, chunk_bytes=1024)
    job = Job(odd)
    if mode == "failures":
        for case, run in (
            ("mismatch", job.mismatch),
            ("nonfinite", job.nonfinite),
            ("splits", job.splits),
            ("ahead", job.ahead),
            ("left_step", lambda: job.steps(2, 0)),
            ("mid_step", lambda: job.steps(4, 1)),
            (
                "refused",
                lambda: job.raised_on_one_rank("average") + job.raised_on_one_rank("allgather"),
            ),
            ("skipped", lambda: job.raised_on_one_rank("allgather", interrupt=True)),
        ):
            job.report(case, run())
    elif mode == "cross_order":
        first, second = (0, 1) if job.rank < odd else (1, 0)
        mc.average(np.ones(4, np.float32), team=first)
        mc.average(np.ones(4, np.float32), team=second)
        print(f"rank {job.rank} was not stopped", flush=True)
    mc.finalize()
    print(f"done rank {job.rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
