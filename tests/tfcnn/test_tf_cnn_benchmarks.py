"""The unmodified upstream tf_cnn_benchmarks with --variable_update=ps_ml_comm at 2 ranks.

Needs a checkout of github.com/tensorflow/benchmarks: TF_CNN_BENCHMARKS_DIR names it
(its root or scripts/tf_cnn_benchmarks); without it every test skips and says so.
Upstream is not part of ml_comm and is never copied into it. Runs start it as users do,
`python -m ml_comm.tfcnn tf_cnn_benchmarks.py ...`, except the one that checks that
the plain command line leaves upstream as it is.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

MPIEXEC = Path(sys.prefix) / "bin" / "mpiexec"
TIMEOUT_S = int(os.environ.get("ML_COMM_TFCNN_TIMEOUT", "900"))
CPU = ["--device=cpu", "--data_format=NHWC"]
# The smallest run of ps_ml_comm (the trivial model), plus the end-of-run variable check.
TRIVIAL = [
    "--variable_update=ps_ml_comm",
    "--number_ml_comm_threads=2",
    "--model=trivial",
    *CPU,
    "--batch_size=8",
    "--num_batches=20",
    "--ml_comm_check_variables",
]


def upstream_dir() -> Path | None:
    root = os.environ.get("TF_CNN_BENCHMARKS_DIR")
    if not root:
        return None
    for candidate in (Path(root), Path(root) / "scripts" / "tf_cnn_benchmarks"):
        if (candidate / "tf_cnn_benchmarks.py").is_file():
            return candidate
    pytest.fail(f"TF_CNN_BENCHMARKS_DIR={root} holds no tf_cnn_benchmarks.py")


UPSTREAM = upstream_dir()
pytestmark = pytest.mark.skipif(
    UPSTREAM is None,
    reason="TF_CNN_BENCHMARKS_DIR is not set: point it at a checkout of "
    "github.com/tensorflow/benchmarks to run upstream tf_cnn_benchmarks with ps_ml_comm",
)


@pytest.fixture(scope="module", autouse=True)
def legacy_keras():
    if importlib.util.find_spec("tf_keras") is None:
        pytest.fail(
            "tf_cnn_benchmarks needs legacy Keras: .venv/bin/pip install --no-deps tf_keras==2.21.0"
        )


class Run:
    """One job's exit status and each rank's stdout and stderr (from mpiexec's
    per-rank output files, so that lines of different ranks never mix)."""

    def __init__(self, returncode: int, out: list[str], err: list[str]):
        self.returncode = returncode
        self.out = out
        self.err = err

    def lines(self, rank: int) -> list[str]:
        return self.out[rank].splitlines()

    def tail(self) -> str:
        return "\n".join(
            f"--- rank {r} stdout:\n{o[-3000:]}\n--- rank {r} stderr:\n{e[-3000:]}"
            for r, (o, e) in enumerate(zip(self.out, self.err))
        )


def run(tmp_path: Path, nranks: int, args: list[str], wrapper: bool = True) -> Run:
    launch = [sys.executable, "-m", "ml_comm.tfcnn"] if wrapper else [sys.executable]
    files = ["-outfile-pattern", f"{tmp_path}/out.%r", "-errfile-pattern", f"{tmp_path}/err.%r"]
    cmd = [str(MPIEXEC), *files, "-n", str(nranks), *launch, "tf_cnn_benchmarks.py", *args]
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen(cmd, cwd=UPSTREAM, env=env)
    timed_out = False
    try:
        proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.terminate()  # mpiexec ends the ranks
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def read(name: str) -> str:
        path = tmp_path / name
        return path.read_text(errors="replace") if path.exists() else ""

    result = Run(
        proc.returncode,
        [read(f"out.{r}") for r in range(nranks)],
        [read(f"err.{r}") for r in range(nranks)],
    )
    if timed_out:
        pytest.fail(f"did not finish in {TIMEOUT_S} s: {' '.join(cmd)}\n{result.tail()}")
    return result


def check_ps_ml_comm_run(job: Run, nranks: int) -> None:
    assert job.returncode == 0, job.tail()
    for rank in range(nranks):
        lines = job.lines(rank)
        assert "Variables:   ps_ml_comm" in lines, job.tail()
        assert any(re.fullmatch(r"total images/sec: \d+\.\d+", line) for line in lines), job.tail()
    lines = job.lines(0)
    total = [line for line in lines if line.startswith(f"ml_comm: total images/sec over {nranks}")]
    assert len(total) == 1, job.tail()
    rates = re.search(r"\(per rank: (.*)\)", total[0]).group(1).split(", ")
    assert len(rates) == nranks and all(float(r) > 0 for r in rates), total
    assert f"ml_comm: trainable variables identical on all {nranks} ranks" in job.out[0], job.tail()
    # The graph builds its gradients before its broadcast: not a job that never broadcasts.
    assert "no weights were broadcast" not in job.err[0], job.tail()
    for rank in range(1, nranks):  # rank 0 alone reports
        assert "ml_comm: total" not in job.out[rank], job.tail()


def step_losses(job: Run, rank: int) -> list[str]:
    return [line.split("\t")[-1] for line in job.lines(rank) if re.match(r"\d+\timages/sec:", line)]


def test_trivial_two_ranks(tmp_path):
    job = run(tmp_path, 2, TRIVIAL)
    check_ps_ml_comm_run(job, 2)
    assert "Batch size:  16 global" in job.lines(0)
    assert "ml_comm:     2 ranks, 1 team(s) of 2 communication thread(s)" in job.lines(0)


def test_trivial_two_ranks_two_teams(tmp_path):
    args = [a for a in TRIVIAL if not a.startswith(("--number_ml_comm", "--num_batches"))]
    more = ["--number_ml_comm_threads=1", "--ml_comm_teams=2", "--num_batches=5"]
    check_ps_ml_comm_run(run(tmp_path, 2, [*args, *more]), 2)


def test_resnet50_two_ranks(tmp_path):
    args = [
        "--variable_update=ps_ml_comm",
        "--number_ml_comm_threads=1",
        "--model=resnet50",
        *CPU,
        "--batch_size=2",
        "--num_batches=2",
        "--num_warmup_batches=1",
        "--ml_comm_check_variables",
    ]
    job = run(tmp_path, 2, args)
    check_ps_ml_comm_run(job, 2)
    # The ranks trained on different data (seeds offset by rank): the identical variables
    # at the end come from the broadcast and the averaging, not from identical inputs.
    losses = [step_losses(job, rank) for rank in (0, 1)]
    assert losses[0] and losses[1] and losses[0] != losses[1], job.tail()


def test_other_modes_are_untouched(tmp_path):
    args = ["--variable_update=independent", "--model=trivial", *CPU]
    job = run(tmp_path, 1, [*args, "--batch_size=4", "--num_batches=2", "--num_warmup_batches=1"])
    assert job.returncode == 0, job.tail()
    lines = job.lines(0)
    assert "Variables:   independent" in lines and "Devices:     ['/cpu:0']" in lines
    assert not any(line.startswith("ml_comm:") for line in lines)


def test_the_plain_command_line_is_upstream_alone(tmp_path):
    """Without `python -m ml_comm.tfcnn` nothing of ml_comm runs: upstream refuses the mode."""
    job = run(tmp_path, 1, [*TRIVIAL, "--num_batches=1"], wrapper=False)
    assert job.returncode != 0, job.tail()
    assert "ps_ml_comm" in job.err[0] and not any("ml_comm:" in o for o in job.out), job.tail()


def test_bad_input_fails_with_the_reason(tmp_path):
    args = ["--variable_update=ps_ml_comm", "--model=trivial", *CPU, "--num_gpus=2"]
    job = run(tmp_path, 2, [*args, "--num_batches=1"])
    assert job.returncode != 0
    message = "--variable_update=ps_ml_comm runs one device per rank: use --num_gpus=1"
    # Each rank raises it; the first one's abort may end the other before it prints.
    assert any(message in err for err in job.err), job.tail()
