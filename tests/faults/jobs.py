"""Launching a small MPI job from a plain pytest process and checking how it ended.

Each job gets a unique token on its command line, so that the processes it left
behind (if any) can be found in /proc without psutil.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

PY = sys.executable
MPIEXEC = str(Path(PY).parent / "mpiexec")
SCRIPTS = Path(__file__).resolve().parent / "scripts"
# Variables through which an enclosing launcher would make the job's ranks think
# they belong to it.
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPI_LOCAL", "OMPI_", "PALS_", "SLURM_")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    env.update(extra)
    return env


@dataclass
class Job:
    returncode: int | None  # None: still running at the timeout (then killed)
    seconds: float
    stdout: str
    stderr: str
    token: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def detail(self) -> str:
        return (
            f"exit {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-5000:]}"
        )

    def started_pids(self) -> dict[int, int]:
        """rank -> pid, from the "started rank R pid P" lines."""
        # The launcher may run two ranks' lines together: search, do not split.
        return {int(r): int(p) for r, p in re.findall(r"started rank (\d+) pid (\d+)", self.stdout)}


def processes_with(token: str) -> list[str]:
    """'pid: command line' of every process whose command line contains token."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in cmdline:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def wait_gone(token: str, seconds: float = 5.0) -> list[str]:
    """The job's processes still alive after up to `seconds` (zombies count as gone)."""
    deadline = time.monotonic() + seconds
    while True:
        left = [p for p in processes_with(token) if not _zombie(int(p.split(":")[0]))]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        return "\nState:\tZ" in (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return True


def run_job(cmd: list[str], token: str, timeout: float, env: dict | None = None) -> Job:
    """Run cmd (which must carry `token`); on timeout kill its process group and
    whatever else carries the token, and report returncode None."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env if env is not None else clean_env(),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        for line in processes_with(token):
            try:
                os.kill(int(line.split(":")[0]), 9)
            except OSError:
                pass
        out, err = proc.communicate()
        rc = None
    return Job(rc, time.monotonic() - start, out, err, token)


def mpiexec_job(nranks: int, script: str, *args: str, timeout: float = 60, **env: str) -> Job:
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC, "-n", str(nranks), PY, str(SCRIPTS / script), *args, token]
    return run_job(cmd, token, timeout, clean_env(**env))


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, comm) of the processes whose parent is pid."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(pid):
            out.append((int(entry.name), fields.get("Name", "").strip()))
    return out


def alive(pid: int) -> bool:
    return (Path("/proc") / str(pid)).exists() and not _zombie(pid)


def kill_all_with(token: str) -> None:
    for line in processes_with(token):
        try:
            os.kill(int(line.split(":")[0]), 9)
        except OSError:
            pass
