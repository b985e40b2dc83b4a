"""`python -m ml_comm --check` under srun on the two test-bed nodes: one report from
rank 0 with both nodes' lines, Slurm's task count against the MPI size, the network
variables the job sets, each node's cores, and the note that the bundled mpich wheel
runs under Slurm."""

from __future__ import annotations

import re
import sys

PY = sys.executable


def test_check_under_srun_reports_both_nodes_and_the_bundled_wheel(testbed):
    proc = testbed.srun([PY, "-m", "ml_comm", "--check"], timeout=120)
    detail = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, detail
    out = proc.stdout
    assert out.count("ml_comm check: 2 MPI ranks") == 1, detail
    assert re.search(r"^launcher +.*SLURM_STEP_NUM_TASKS=2.*; MPI size 2: match$", out, re.M), out
    assert re.search(r"^network vars .*UCX_NET_DEVICES=eth0 UCX_TLS=self,tcp", out, re.M), out
    assert "note           this is the MPICH wheel bundled" in out, out
    hosts = re.findall(r"^rank [01] +(\S+) pid", out, re.M)
    assert len(hosts) == 2 and hosts[0] != hosts[1], out
    for rank, host in enumerate(hosts):
        assert re.search(rf"^cores +{host}: rank {rank} on cpus [\d,-]+ \(", out, re.M), out
    assert re.search(r"over 2 ranks: exact, [\d.]+ ms", out), out
