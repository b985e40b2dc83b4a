"""pytest plugin loaded on every rank by tools/horovod_suite.py (`-p horovod_suite_plugin`).

- Each test's outcome goes to RESULTS/rank<N>.jsonl as it ends, so the runner knows what
  ran after any exit, a killed rank's too.
- A watchdog ends this rank (exit 124, every thread's stack on stderr) when a test runs
  past TEST_TIMEOUT seconds: the launcher then ends the others and the runner goes on
  after that test, so no test can hang the suite.
- After each test the ranks compare the test they finished (MPI allgather on a
  communicator of their own, under the watchdog): the next test starts on every rank
  together, and ranks that disagree stop the run instead of pairing one test's
  collectives with another's.
- Tests of the expected list that are to fail are marked xfail(strict): they must fail,
  and one that passes fails the run (its entry is stale).
- The modules Horovod's test utilities import from Horovod's launcher
  (`horovod.runner.util.threads`), which are no part of the API that ml_comm.horovod
  answers, are provided here.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

RESULTS = Path(os.environ["ML_COMM_HVD_SUITE_RESULTS"])
TEST_TIMEOUT = float(os.environ.get("ML_COMM_HVD_SUITE_TEST_TIMEOUT", "120"))
# JSON: {"pattern": "reason"} for the tests that must fail (tools/horovod_suite.py).
XFAIL = json.loads(os.environ.get("ML_COMM_HVD_SUITE_XFAIL", "{}"))
RANK = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def _launcher_modules() -> None:
    def in_thread(target, args=(), name=None, daemon=True, silent=False):
        thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
        thread.start()
        return thread

    threads = types.ModuleType("horovod.runner.util.threads")
    threads.in_thread = in_thread
    for name in ("horovod.runner", "horovod.runner.util"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["horovod.runner.util"].threads = threads
    sys.modules["horovod.runner.util.threads"] = threads


def short_id(nodeid: str) -> str:
    """'parallel/test_x.py::Class::test' -> 'test_x.py::Class::test'."""
    path, _, rest = nodeid.partition("::")
    return f"{path.rsplit('/', 1)[-1]}::{rest}"


class _Watchdog:
    def __init__(self) -> None:
        self.timer: threading.Timer | None = None

    def start(self, what: str) -> None:
        self.stop()
        self.timer = threading.Timer(TEST_TIMEOUT, self._expire, args=(what,))
        self.timer.daemon = True
        self.timer.start()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    @staticmethod
    def _expire(what: str) -> None:
        _record({"id": what, "outcome": "timeout", "seconds": TEST_TIMEOUT})
        print(f"\n!! rank {RANK}: {what} ran past {TEST_TIMEOUT:.0f} s; stacks:", file=sys.stderr)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(124)


_watchdog = _Watchdog()
_started: dict[str, float] = {}
_outcomes: dict[str, dict] = {}


def _record(entry: dict) -> None:
    with open(RESULTS / f"rank{RANK}.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def _comm():
    from ml_comm.mpi.init import init_mpi

    mpi = init_mpi()
    if not hasattr(_comm, "dup"):
        _comm.dup = mpi.COMM_WORLD.Dup()
    return _comm.dup


def pytest_configure(config) -> None:
    _launcher_modules()
    RESULTS.mkdir(parents=True, exist_ok=True)


def pytest_collection_modifyitems(config, items) -> None:
    from fnmatch import fnmatchcase

    for item in items:
        for pattern, reason in XFAIL.items():
            if fnmatchcase(short_id(item.nodeid), pattern):
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True, run=True))
                break


def pytest_collection_finish(session) -> None:
    if RANK == 0:  # the tests that will run (after -k), in their order
        ids = [short_id(i.nodeid) for i in session.items]
        (RESULTS / "collected.json").write_text(json.dumps(ids))


def pytest_runtest_logstart(nodeid, location) -> None:
    _started[nodeid] = time.monotonic()
    _watchdog.start(short_id(nodeid))


def pytest_runtest_logreport(report) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"id": short_id(report.nodeid)})
    if report.when == "call" or report.outcome != "passed":
        if "outcome" in entry and entry["outcome"] != "passed":
            return  # a teardown error after a failure: the failure is what counts
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        entry["outcome"] = outcome
        if report.skipped:
            longrepr = report.longrepr
            entry["reason"] = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
            entry["reason"] = entry["reason"].removeprefix("Skipped: ")
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            lines = (report.longreprtext or "").strip().splitlines()
            entry["message"] = (crash.message if crash else lines[-1] if lines else "")[:400]


def pytest_runtest_logfinish(nodeid, location) -> None:
    entry = _outcomes.pop(nodeid, {"id": short_id(nodeid), "outcome": "passed"})
    entry.setdefault("outcome", "passed")
    entry["seconds"] = round(time.monotonic() - _started.pop(nodeid, time.monotonic()), 2)
    _record(entry)
    # Still under the watchdog: a rank left inside a collective never arrives here.
    finished = _comm().allgather(entry["id"])
    _watchdog.stop()
    if len(set(finished)) != 1:
        print(f"!! ranks finished different tests: {finished}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)
