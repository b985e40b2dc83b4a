"""The SimGrid scale model (model/, tools/project.py) runs the core's own algorithms on sizes.

Message counts are exact functions of the algorithm, the plan and the node count, so
they check that the plan, the segments and the algorithms ran unchanged, that every
message matched (a lost one would hang the simulation, which then ends with an error),
and what the agreement costs per request. Skips where SimGrid is not installed (the
test command installs it as root: tools/simgrid_packages.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import project  # noqa: E402
import project_noise  # noqa: E402
import project_platforms  # noqa: E402
from simgrid_packages import missing  # noqa: E402

pytestmark = pytest.mark.skipif(bool(missing()), reason="SimGrid (libsimgrid-dev) not installed")

NODE = {
    "reduce_bytes_per_s": 4e9,
    "convert_bytes_per_s": 2e9,
    "copy_bytes_per_s": 8e9,
    "send_overhead_s": 1e-6,
    "recv_overhead_s": 1e-6,
}
MIB = 1 << 20


@pytest.fixture(scope="module")
def built() -> None:
    project.build()


def sweep(nodes: int, args: list[str], sizes: list[int]) -> dict:
    net = project_platforms.Network(250e6, 20e-6)
    with tempfile.TemporaryDirectory() as d:
        plat = project.write_platform(
            project_platforms.platform_xml("testbed", nodes, net), Path(d)
        )
        return project.mlcsim(
            plat, nodes, [*project.node_args(NODE), *args, "sweep", *map(str, sizes)]
        )


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_ring_messages(built, nodes):
    # 8 MiB on the team's one thread: 8 segments of 1 MiB, each 2(n-1) sends; 2 calls.
    out = sweep(nodes, ["--threads", "1", "--algorithm", "ring", "--agree", "alltoall"], [8 * MIB])
    assert out["data_messages_per_rank"] == 2 * 8 * 2 * (nodes - 1)
    assert out["agree_messages_per_rank_per_request"] == nodes - 1  # every signature to every rank


@pytest.mark.parametrize("nodes,rank0_sends", [(2, 1), (3, 2), (5, 3)])
def test_the_tree_agreement_is_the_default(built, nodes, rank0_sends):
    out = sweep(nodes, ["--threads", "1", "--algorithm", "ring"], [8 * MIB])
    assert out["agree_messages_per_rank_per_request"] == rank0_sends


@pytest.mark.parametrize("nodes,rank0_sends", [(2, 1), (4, 2), (5, 3), (16, 4)])
def test_recursive_doubling_and_tree_agreement(built, nodes, rank0_sends):
    # 64 KiB on the caller: one segment, log2(p2) exchanges (+1 fold send to rank p2
    # on rank 0 when n is not a power of two); the tree agreement likewise.
    out = sweep(nodes, ["--agree", "tree", "--algorithm", "rd"], [64 * 1024])
    assert out["data_messages_per_rank"] == 2 * rank0_sends
    assert out["agree_messages_per_rank_per_request"] == rank0_sends


def test_direct_rides_in_the_agreement(built):
    # 1 KiB is at most direct_bytes: no message of its own, log2(4) agreement messages.
    out = sweep(4, [], [1024])
    assert out["data_messages_per_rank"] == 0
    assert out["agree_messages_per_rank_per_request"] == 2


def test_training_counts_every_tensor(built, tmp_path):
    # A keyed group of 3 tensors arriving out of layout order: one request per step, and
    # the step cannot end before the backward time of all three.
    tensors = tmp_path / "t.txt"
    tensors.write_text("1 262144 0.01\n0 262144 0.01\n2 1000 0.01\n")
    net = project_platforms.Network(250e6, 20e-6)
    plat = project.write_platform(project_platforms.platform_xml("testbed", 2, net), tmp_path)
    args = [*project.node_args(NODE), "--forward", "0.02", "--steps", "3", "train", str(tensors)]
    out = project.mlcsim(plat, 2, args)
    assert len(out["steps"]) == 3
    assert out["agree_messages_per_rank_per_request"] == 1
    assert all(s["step_s"] >= 0.05 for s in out["steps"])


def train(nodes: int, lines: str, tmp_path: Path, extra: list[str], hosts: int | None = None):
    tensors = tmp_path / "t.txt"
    tensors.write_text(lines)
    net = project_platforms.Network(250e6, 20e-6)
    xml = project_platforms.platform_xml("testbed", hosts or nodes, net)
    plat = project.write_platform(xml, tmp_path)
    args = [*project.node_args(NODE), *extra, "train", str(tensors)]
    return project.mlcsim(plat, nodes, args)


def factors_file(tmp_path: Path, rows: list[list[float]]) -> list[str]:
    return ["--compute-factors", str(project_noise.write(rows, tmp_path / "f.txt"))]


def test_compute_factors_multiply_each_ranks_compute(built, tmp_path):
    # Factors all 1.0 are no noise at all; all 2.0 double every rank's forward and
    # backward (0.05 s of compute, and the communication it does not hide: 0.0525 s a
    # step without them).
    lines = "0 262144 0.01\n1 262144 0.01\n2 1000 0.01\n"
    common = ["--forward", "0.02", "--steps", "4"]
    plain = train(3, lines, tmp_path, common)
    one = train(3, lines, tmp_path, [*common, *factors_file(tmp_path, [[1.0] * 4] * 3)])
    two = train(3, lines, tmp_path, [*common, *factors_file(tmp_path, [[2.0] * 4] * 3)])
    assert one["steps"] == plain["steps"]
    assert project_runs_mean_step(plain) >= 0.05
    assert project_runs_mean_step(two) >= 0.1


def test_a_slow_rank_holds_every_synchronous_step(built, tmp_path):
    # Rank 2 at 1.5 in step 2 only: that step takes its 0.075 s of compute at least, the
    # others stay near 0.05.
    lines = "0 262144 0.01\n1 262144 0.01\n2 1000 0.01\n"
    rows = [[1.0] * 4, [1.0] * 4, [1.0, 1.0, 1.5, 1.0]]
    out = train(
        3, lines, tmp_path, ["--forward", "0.02", "--steps", "4", *factors_file(tmp_path, rows)]
    )
    steps = [s["step_s"] for s in out["steps"]]
    assert steps[2] >= 0.075 > steps[3] and steps[1] < 0.075


def project_runs_mean_step(sim: dict) -> float:
    ends = [s["end_s"] for s in sim["steps"]]
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def test_horovods_cycle_takes_what_every_rank_has(built, tmp_path):
    # 2 ranks; 3 tensors ready at 0.0205, 0.031, 0.0415 s (0.01 forward, 0.0105 each);
    # the loop wakes every 3 ms from 0 and allreduces what both ranks have, 1 ms each:
    # at 0.021 (done 0.022), 0.033 (done 0.034) and 0.042 (done 0.043). Fused: a
    # threshold of one tensor's bytes keeps them apart (3 allreduces a step).
    table = tmp_path / "ar.txt"
    table.write_text("1 0.001\n1000000000 0.001\n")
    lines = "0 1000 0.0105\n1 1000 0.0105\n2 1000 0.0105\n"
    hvd = ["--horovod", "--cycle", "0.003", "--negotiation", "0", "--allreduce-table", str(table)]
    out = train(2, lines, tmp_path, [*hvd, "--fusion-threshold", "4000", "--forward", "0.01",
                                     "--steps", "1"])  # fmt: skip
    assert out["steps"][0]["end_s"] == pytest.approx(0.043, abs=1e-9)
    assert out["horovod_allreduces"] == 3
    # All three ready in one cycle (no backward time) and fused into one buffer.
    lines = "0 1000 0.0\n1 1000 0.0\n2 1000 0.0\n"
    out = train(2, lines, tmp_path, [*hvd, "--fusion-threshold", "1e9", "--forward", "0.01",
                                     "--steps", "1"])  # fmt: skip
    assert out["horovod_allreduces"] == 1
    assert out["steps"][0]["end_s"] == pytest.approx(0.013, abs=1e-9)  # cycle at 0.012


def test_the_list_after_backprop_starts_when_backprop_ends(built, tmp_path):
    # Three 4 MiB tensors, 0.02 s of backward time apart after 0.01 s forward: 0.07 s of
    # compute. Their ring at 2 ranks moves 2 x 6 MiB a rank over the 250 MB/s link, about
    # 50 ms. Handed over as they come, only the last tensor's share (about 17 ms) follows
    # backprop; in one call after backprop, all of it does.
    lines = "0 1048576 0.02\n1 1048576 0.02\n2 1048576 0.02\n"
    common = ["--forward", "0.01", "--steps", "3", "--threads", "2"]
    overlapped = project_runs_mean_step(train(2, lines, tmp_path, common))
    listed = project_runs_mean_step(train(2, lines, tmp_path, [*common, "--list-after-backprop"]))
    assert 0.07 < overlapped < 0.07 + 0.025
    assert listed > 0.07 + 0.045


def test_copies_to_the_host_delay_a_gradient_by_its_bytes(built, tmp_path):
    # One tensor of 4 MB, crossing PCIe at 4 GB/s: 1 ms to the host before the team may
    # send it, and the reduced batches back after; the step grows by at least the 1 ms.
    lines = "0 1000000 0.01\n"
    common = ["--forward", "0.01", "--steps", "2", "--threads", "1"]
    without = train(2, lines, tmp_path, common)
    with_copies = train(2, lines, tmp_path, [*common, "--pcie-bps", "4e9"])
    grown = project_runs_mean_step(with_copies) - project_runs_mean_step(without)
    assert 1e-3 <= grown <= 2.5e-3


def test_ranks_share_their_nodes_link(built, tmp_path):
    # 4 ranks: a ring whose neighbours share a host (0,0,1,1) crosses the network twice a
    # round; one whose every neighbour is on the other host (0,1,0,1) four times.
    def sweep_on(placement: str) -> float:
        (tmp_path / "p.txt").write_text(placement)
        net = project_platforms.Network(250e6, 20e-6)
        plat = project.write_platform(project_platforms.platform_xml("testbed", 2, net), tmp_path)
        args = [*project.node_args(NODE), "--threads", "1", "--algorithm", "ring"]
        args += ["--placement", str(tmp_path / "p.txt"), "sweep", str(8 * MIB)]
        return project.mlcsim(plat, 4, args)["rows"][0]["time_s"]

    assert sweep_on("0\n1\n0\n1\n") > 1.3 * sweep_on("0\n0\n1\n1\n")


def test_a_run_lengthened_gives_the_same_replicates(built, tmp_path):
    # Replicate k draws with seed 1 + k whatever else runs, so a stored run of k
    # replicates is lengthened by running only the rest (project_reproduce's resume).
    import json

    import project_runs

    cal = json.loads((ROOT / "model" / "calibration.json").read_text())
    case = project_runs.Case(
        platform="aries", nodes=3, model="custom:400000:8", step_s=0.05, profile="equal",
        threads=1, noise=project_noise.PRESETS["hpc"],
    )  # fmt: skip
    whole = project_runs.run(case, cal, 3, tmp_path)
    rest = project_runs.run(case, cal, 3, tmp_path, first=1)
    assert len(set(whole.efficiencies)) == 3  # the replicates differ
    assert rest.efficiencies == whole.efficiencies[1:]
