"""The multi-node test bed (tools/testbed.sh) as a pytest session fixture.

The fixture brings the test bed up once per session (and down at the end, unless it was
already up before the session). The tests skip, with the reason, where it cannot exist:
not root, no network namespaces, Slurm/munge not installed, or ML_COMM_SKIP_TESTBED=1.
Once those are there, a test bed that fails to come up is an error, not a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "tools" / "testbed.sh"
NODES = 2
# srun --time (minutes) and the subprocess timeout (seconds): a hung job never hangs CI.
SRUN_TIME_MIN = 2
SRUN_TIMEOUT_S = 150
# The packages and programs the test bed needs, listed once (tools/dev.py test installs them).
sys.path.insert(0, str(ROOT / "tools"))
from slurm_step import run_step  # noqa: E402
from testbed_packages import PACKAGES, missing_tools  # noqa: E402

APT_HINT = f"apt-get install -y {' '.join(PACKAGES)}; `python3 tools/dev.py test` does so as root"


@dataclass
class Testbed:
    base: Path
    nodes: int
    env: dict

    @property
    def veths(self) -> list[str]:
        prefix = os.environ.get("TESTBED_PREFIX", "mlctb")
        return [f"{prefix}-v{i}" for i in range(1, self.nodes + 1)]

    def veth_counters(self) -> dict[str, tuple[int, int]]:
        """(tx, rx) bytes of each node's host-side veth: tx goes to the node, rx comes from it."""
        out = {}
        for veth in self.veths:
            stats = Path("/sys/class/net") / veth / "statistics"
            out[veth] = (
                int((stats / "tx_bytes").read_text()),
                int((stats / "rx_bytes").read_text()),
            )
        return out

    def srun(
        self,
        args: list[str],
        nodes: int | None = None,
        timeout: float = SRUN_TIMEOUT_S,
        mpi: str = "pmi2",
    ) -> subprocess.CompletedProcess:
        """srun -N nodes --ntasks-per-node=1 --mpi=MPI with a time limit on both sides."""
        options = [f"--nodes={nodes or self.nodes}", "--ntasks-per-node=1", f"--mpi={mpi}"]
        return run_step([*options, f"--time={SRUN_TIME_MIN}", *args], self.env, ROOT, timeout)


def _skip_reason() -> str | None:
    if os.environ.get("ML_COMM_SKIP_TESTBED") == "1":
        return "ML_COMM_SKIP_TESTBED=1"
    if not sys.platform.startswith("linux"):
        return "the test bed needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the test bed needs root (network namespaces, veths, Slurm daemons)"
    missing = missing_tools()
    if missing:
        return f"test bed: {', '.join(missing)} not installed ({APT_HINT})"
    probe = subprocess.run(
        ["unshare", "--net", "--uts", "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"test bed: cannot create network namespaces here: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def testbed():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    base = Path(os.environ.get("TESTBED_DIR", "/tmp/ml_comm-testbed"))
    env = dict(os.environ, TESTBED_DIR=str(base), NODES=str(NODES))
    was_up = subprocess.run(
        [TESTBED, "status"], env=env, capture_output=True, timeout=60
    ).returncode == 0 and (base / "nodes").read_text().strip() == str(NODES)
    if not was_up:
        subprocess.run([TESTBED, "down"], env=env, capture_output=True, timeout=120)
        up = subprocess.run([TESTBED, "up"], env=env, capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            logs = ""
            for log in sorted((base / "log").glob("*.log")):
                logs += f"\n--- {log}\n" + "\n".join(log.read_text().splitlines()[-15:])
            pytest.fail(f"tools/testbed.sh up failed:\n{up.stdout}{up.stderr}{logs}")
    job_env = dict(
        env,
        SLURM_CONF=str(base / "etc" / "slurm.conf"),
        # Without these, UCX moves the data between the namespaces through shared memory.
        UCX_TLS="self,tcp",
        UCX_NET_DEVICES="eth0",
    )
    try:
        yield Testbed(base=base, nodes=NODES, env=job_env)
    finally:
        if not was_up:
            subprocess.run([TESTBED, "down"], env=env, capture_output=True, timeout=120)
