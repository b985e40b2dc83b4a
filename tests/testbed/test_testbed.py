"""End-to-end tests on the multi-node test bed: srun across two namespace "nodes".

(a) an exact allreduce check through ml_comm (allreduce_worker.py), (b) the digits
training example, (c) the veth byte counters prove that (a)'s data crossed the emulated
network instead of shared memory. See tools/testbed.sh and docs/developer.md.
"""

from __future__ import annotations

import json
import sys

import pytest

PY = sys.executable
WORKER = "tests/testbed/allreduce_worker.py"


def _results(proc) -> list[dict]:
    rows = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return sorted(rows, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def allreduce_run(testbed):
    """One srun of the exact allreduce check, with the veth counters read around it."""
    before = testbed.veth_counters()
    proc = testbed.srun([PY, WORKER])
    after = testbed.veth_counters()
    delta = {v: (after[v][0] - before[v][0], after[v][1] - before[v][1]) for v in testbed.veths}
    return proc, _results(proc), delta


def test_allreduce_exact_across_nodes(testbed, allreduce_run):
    proc, rows, _ = allreduce_run
    detail = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert len(rows) == testbed.nodes, detail
    assert [r["rank"] for r in rows] == list(range(testbed.nodes)), detail
    assert all(r["nranks"] == testbed.nodes for r in rows), detail
    # one rank per node: each rank ran in its own namespace under its node's hostname
    assert sorted(r["host"] for r in rows) == [f"node{i}" for i in range(1, testbed.nodes + 1)]
    for r in rows:
        assert r["errors"] == [], f"rank {r['rank']} on {r['host']}: {r['errors'][:3]}"
    assert proc.returncode == 0, detail
    assert rows[0]["payload_bytes"] > 100 << 20  # the sizes include some of several MiB


def test_allreduce_data_crossed_the_veths(testbed, allreduce_run):
    proc, rows, delta = allreduce_run
    assert proc.returncode == 0 and rows, proc.stderr[-3000:]
    payload = rows[0]["payload_bytes"]
    # Every rank must send its whole contribution out and receive the others' sum: at
    # least the buffer each way, whatever the algorithm (n=2: exactly what the ring's
    # reduce-scatter + allgather move). Host side of the veth: tx = into the node, rx = out.
    need = payload
    for veth, (tx, rx) in delta.items():
        assert rx >= need, (
            f"{veth}: only {rx} B left the node, the allreduce must send {need} B: "
            "the data did not cross the emulated network (UCX_TLS=self,tcp UCX_NET_DEVICES=eth0?)"
        )
        assert tx >= need, f"{veth}: only {tx} B entered the node, the allreduce needs {need} B"
        # and not wildly more (headers, Slurm and PMI traffic: a few per cent)
        assert rx < 2 * need and tx < 2 * need, f"{veth}: tx {tx} rx {rx} for {need} B"


def test_digits_example_two_nodes(testbed):
    proc = testbed.srun([PY, "examples/digits_numpy.py"])
    detail = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, detail
    assert f"# digits softmax regression: {testbed.nodes} rank(s)" in proc.stdout, detail
    assert f"OK: weights identical on all {testbed.nodes} rank(s)" in proc.stdout, detail
