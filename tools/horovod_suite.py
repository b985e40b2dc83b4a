#!/usr/bin/env python3
"""Horovod's own TensorFlow tests on ml_comm.horovod: test/parallel's test_tensorflow.py,
test_tensorflow2_keras.py and test_tensorflow_keras.py of Horovod's release commit, unchanged,
each `horovod` import answered by ml_comm.horovod (`python -m ml_comm.horovod`), under
mpiexec; results against tests/horovod/expected.ini (docs/horovod.md has the table).

    python3 tools/horovod_suite.py extract --repo PATH   # PATH: a Horovod git directory
    python3 tools/horovod_suite.py run           # the test command's sample (a few minutes)
    python3 tools/horovod_suite.py run --full    # every test: about 6 minutes here
    python3 tools/horovod_suite.py run --full --ranks 3 --files test_tensorflow.py

Horovod's test files are not part of this repository and its PyPI sdist does not ship them:
`extract` copies those of the pinned commit out of a Horovod clone into a cache outside the
tree (ML_COMM_HOROVOD_TESTS, else ~/.cache/ml_comm/horovod-tests/<commit>). Where the cache
is missing, `run` says so and exits 5 (skipped), never 0.

A rank that runs a test past --timeout seconds ends itself (tools/horovod_suite_plugin.py);
the run goes on after that test, which counts as failed. Only the standard library is used
here: the tests run in .venv.
"""

from __future__ import annotations

import argparse
import configparser
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
EXPECTED = ROOT / "tests" / "horovod" / "expected.ini"
HOROVOD_COMMIT = (
    "1d217b59949986d025f6db93c49943fb6b6cc78f"  # v0.28.1, the API ml_comm.horovod answers
)
SUITE_FILES = ("test_tensorflow.py", "test_tensorflow2_keras.py", "test_tensorflow_keras.py")
# What the three files import from Horovod's tree besides themselves.
SOURCE_PATHS = tuple(f"test/parallel/{f}" for f in (*SUITE_FILES, "base_test_tensorflow.py")) + (
    "test/utils/common.py",
    "test/conftest.py",
)
# The runs: every file at 2 ranks, the dtype-heavy one at 3 too.
DEFAULT_RUNS = (
    ("test_tensorflow.py", 2),
    ("test_tensorflow.py", 3),
    ("test_tensorflow2_keras.py", 2),
    ("test_tensorflow_keras.py", 2),
)
# The test command runs these tests of test_tensorflow.py (a few minutes in all; the whole
# file takes about two at 2 ranks and four at 3): every dtype through sums and averages, 16-bit
# scaling, each collective's gradient, in-place broadcast, alltoall's return, and ranks
# that disagree on a dtype (FailedPreconditionError). `run --full` runs every test.
SAMPLE = {
    "test_tensorflow.py": [
        f"TensorFlowTests::test_horovod_{name}"
        for name in (
            "allreduce_cpu",
            "allreduce_average_cpu",
            "reducescatter_cpu_postscale",
            "allreduce_grad_cpu",
            "broadcast_grad_cpu",
            "allgather_grad_cpu",
            "alltoall_grad_cpu",
            "reducescatter_grad_cpu",
            "alltoall_equal_split_grad_cpu",
            "alltoall_empty_cpu",
            "broadcast_inplace_multiple_cpu",
            "allreduce_type_error",
        )
    ]
}
SKIPPED_EXIT = 5  # pytest's "no tests ran"
SELECT = os.environ.get("ML_COMM_HVD_SUITE_SELECT")  # pytest -k, to run part of a file


def cache_dir() -> Path:
    configured = os.environ.get("ML_COMM_HOROVOD_TESTS")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "ml_comm" / "horovod-tests" / HOROVOD_COMMIT


def source_problem() -> str | None:
    """Why the suite cannot run here (None when Horovod's test files are in the cache)."""
    src = cache_dir()
    missing = [p for p in SOURCE_PATHS if not (src / p).is_file()]
    if not missing:
        return None
    return (
        f"Horovod's test files ({HOROVOD_COMMIT[:8]}, v0.28.1) are not in {src} "
        f"(missing {missing[0]}); copy them from a Horovod clone: "
        f"python3 tools/horovod_suite.py extract --repo PATH"
    )


def extract(repo: Path) -> Path:
    """The pinned commit's test files from a Horovod git directory (or work tree) into the
    cache, replacing what was there."""
    git = ["git", f"--git-dir={repo / '.git' if (repo / '.git').exists() else repo}"]
    archive = subprocess.run(
        [*git, "archive", "--format=tar", HOROVOD_COMMIT, *SOURCE_PATHS], capture_output=True
    )
    if archive.returncode != 0:
        sys.exit(f"git archive {HOROVOD_COMMIT} failed in {repo}: {archive.stderr.decode()}")
    target = cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as t:
        t.extractall(staging, filter="data")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


@dataclass
class Expected:
    """tests/horovod/expected.ini: patterns of tests that must fail or skip, each section
    with its kind (the section's name) and reason."""

    fail: dict[str, str] = field(default_factory=dict)  # pattern -> reason
    skip: dict[str, tuple[str, str]] = field(default_factory=dict)  # pattern -> (skip text, why)

    @classmethod
    def load(cls, ranks: int, path: Path = EXPECTED) -> Expected:
        """The entries for a run at `ranks` ranks (a section with `ranks = 3 4` holds at
        those rank counts only)."""
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(path.read_text())
        out = cls()
        for kind in parser.sections():
            entry = parser[kind]
            if "ranks" in entry and str(ranks) not in entry["ranks"].split():
                continue
            why = f"{kind}: {entry['reason']}"
            patterns = entry["tests"].split()
            if entry["outcome"] == "fail":
                out.fail.update({p: why for p in patterns})
            elif entry["outcome"] == "skip":
                out.skip.update({p: (entry["skip_reason"], why) for p in patterns})
            else:
                raise ValueError(f"{path} [{kind}]: outcome must be fail or skip")
        return out

    def skip_entry(self, test: str) -> tuple[str, str] | None:
        return next((v for p, v in self.skip.items() if fnmatchcase(test, p)), None)


@dataclass
class Verdict:
    test: str
    status: str  # passed, expected-fail, expected-skip, failed, timeout, unexpected-skip, ...
    detail: str = ""


def combine(per_rank: list[dict | None]) -> dict:
    """One outcome of a test from every rank's record (None: the rank wrote none)."""
    records = [r for r in per_rank if r is not None]
    outcomes = [r["outcome"] for r in records]
    if len(records) < len(per_rank):
        return {"outcome": "timeout" if "timeout" in outcomes else "crashed"}
    for worst in ("timeout", "failed", "xpassed", "error"):
        if worst in outcomes:
            ranks = [i for i, o in enumerate(outcomes) if o == worst]
            message = next((r.get("message", "") for r in records if r["outcome"] == worst), "")
            return {"outcome": worst, "message": f"ranks {ranks}: {message}"}
    if len(set(outcomes)) > 1:
        return {"outcome": "failed", "message": f"ranks differ: {outcomes}"}
    return records[0]


def judge(test: str, result: dict, expected: Expected) -> Verdict:
    outcome = result["outcome"]
    if outcome == "passed":
        return Verdict(test, "passed")
    if outcome == "xfailed":
        return Verdict(test, "expected-fail")
    if outcome == "skipped":
        entry = expected.skip_entry(test)
        reason = result.get("reason", "")
        if entry and entry[0] in reason:
            return Verdict(test, "expected-skip", entry[1])
        return Verdict(test, "unexpected-skip", reason)
    return Verdict(test, outcome, result.get("message", ""))


PASSING = {"passed", "expected-fail", "expected-skip"}


def _pytest_command(n: int, targets: list[str], src: Path) -> list[str]:
    return [
        str(VENV_BIN / "mpiexec"),
        "-l",  # each line of output starts with its rank
        "-n",
        str(n),
        str(VENV_BIN / "python"),
        "-m",
        "ml_comm.horovod",
        "-m",
        "pytest",
        "-v",
        "--tb=short",
        "-rN",
        "-p",
        "horovod_suite_plugin",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--rootdir={src / 'test'}",
        "-o",
        "addopts=",
        *([f"-k={SELECT}"] if SELECT else []),
        *targets,
    ]


def _read_records(folder: Path, n: int) -> list[dict[str, dict]]:
    """Each rank's records by test (the first one a test got: a timeout record stays)."""
    ranks = []
    for r in range(n):
        path = folder / f"rank{r}.jsonl"
        records: dict[str, dict] = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            records.setdefault(record["id"], record)
        ranks.append(records)
    return ranks


def _launch(cmd: list[str], env: dict, folder: Path, log: Path, limit: float) -> None:
    with open(log, "a") as out:
        out.write(f"\n+ {' '.join(cmd)}\n")
        out.flush()
        try:
            subprocess.run(cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                           timeout=limit)  # fmt: skip
        except subprocess.TimeoutExpired:
            out.write(f"!! the run passed {limit:.0f} s and was ended\n")


def run_file(
    name: str, n: int, timeout: float, expected: Expected, log: Path, full: bool
) -> list[Verdict]:
    """The tests of one Horovod file (SAMPLE's unless full) at n ranks, going on after a
    test that ended a rank."""
    parallel = cache_dir() / "test" / "parallel"
    collected: list[str] | None = None
    results: dict[str, dict] = {}
    targets = [str(parallel / name)]
    if not full and name in SAMPLE:
        targets = [f"{parallel / name}::{test}" for test in SAMPLE[name]]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "tools"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "ML_COMM_HVD_SUITE_TEST_TIMEOUT": str(timeout),
        "ML_COMM_HVD_SUITE_XFAIL": json.dumps(
            {p: r for p, r in expected.fail.items() if p.startswith(name)}
        ),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONUNBUFFERED": "1",
        # Horovod's tests average tensors that are no model's gradients, each test from
        # its own state, in one job: ml_comm's check that a job shares its weights (which
        # Horovod has not) would judge them by the tests that ran before.
        "ML_COMM_WEIGHTS_CHECK": "0",
    }
    attempt = 0
    while targets:
        attempt += 1
        # The ranks' records and the tests' files stay beside the log for a look afterwards.
        folder = log.with_suffix(f".run{attempt}")
        folder.mkdir(parents=True, exist_ok=True)
        env["ML_COMM_HVD_SUITE_RESULTS"] = str(folder)
        # Past every test's timeout and the start-up, the whole run is ended too.
        limit = timeout * (len(collected or targets) + 2) + 300
        _launch(_pytest_command(n, targets, cache_dir()), env, folder, log, limit)
        if collected is None:
            listing = folder / "collected.json"
            if not listing.exists():
                return [Verdict(name, "crashed", f"no test was collected (see {log})")]
            collected = json.loads(listing.read_text())
        ranks = _read_records(folder, n)
        pending = [t for t in collected if t not in results]
        for test in pending:
            per_rank = [records.get(test) for records in ranks]
            if all(r is None for r in per_rank):
                break
            results[test] = combine(per_rank)
        rest = [t for t in collected if t not in results]
        if rest and rest == pending:
            # The run ended before its first test ended on any rank: that test is the cause.
            results[rest[0]] = {"outcome": "crashed", "message": f"the run ended (see {log})"}
            rest = rest[1:]
        targets = [f"{parallel}/{t}" for t in rest]
    return [judge(t, results[t], expected) for t in collected or []]


def print_table(label: str, verdicts: list[Verdict]) -> None:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    print(f"{label}: " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)), flush=True)
    for v in verdicts:
        if v.status not in PASSING:
            print(f"   {v.status:16} {v.test}  {v.detail}"[:600], flush=True)


def run(runs: list[tuple[str, int]], timeout: float, full: bool) -> int:
    problem = source_problem()
    if problem:
        print(f"horovod suite skipped: {problem}", flush=True)
        return SKIPPED_EXIT
    logs = Path(tempfile.mkdtemp(prefix="ml_comm-hvd-suite-logs-"))
    passed = failed = skipped = failed_as_listed = 0
    for name, n in runs:
        started = time.monotonic()
        log = logs / f"{name.removesuffix('.py')}-n{n}.log"
        verdicts = run_file(name, n, timeout, Expected.load(n), log, full)
        print_table(
            f"{name} at {n} ranks ({time.monotonic() - started:.0f} s, log {log})", verdicts
        )
        passed += sum(v.status == "passed" for v in verdicts)
        failed_as_listed += sum(v.status == "expected-fail" for v in verdicts)
        skipped += sum(v.status == "expected-skip" for v in verdicts)
        failed += sum(v.status not in PASSING for v in verdicts)
    print(f"horovod: {passed} passed, {failed} failed, {skipped} skipped", flush=True)
    print(f"({failed_as_listed} failed as {EXPECTED.relative_to(ROOT)} expects)", flush=True)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="copy the pinned commit's test files into the cache")
    ex.add_argument("--repo", type=Path, required=True, help="a Horovod git directory or clone")
    rn = sub.add_parser("run", help="run the suite (default: the test command's runs)")
    rn.add_argument("--files", nargs="*", choices=SUITE_FILES)
    rn.add_argument("--ranks", type=int, nargs="*")
    rn.add_argument("--timeout", type=float, default=120, help="seconds per test")
    rn.add_argument("--full", action="store_true", help="every test, not the test command's")
    args = parser.parse_args(argv)
    if args.command == "extract":
        print(f"Horovod's test files of {HOROVOD_COMMIT} in {extract(args.repo)}")
        return 0
    runs = list(DEFAULT_RUNS)
    if args.files or args.ranks:
        runs = [(f, n) for f in args.files or SUITE_FILES for n in args.ranks or (2,)]
    return run(runs, args.timeout, args.full)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
