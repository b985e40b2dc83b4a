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


def test_resnet50_layout():
    counts = project.resnet50_tensors()
    assert len(counts) == 161
    assert sum(counts) == 25_557_032


def test_measured_jitter_multiplies_each_nodes_compute(built, tmp_path):
    # Step times drawn from a file: all 1.0 is no jitter at all; all 2.0 doubles every
    # node's forward and backward time in every step (the 0.05 s of compute and the
    # communication that it does not hide: 0.0525 s a step without jitter).
    tensors = tmp_path / "t.txt"
    tensors.write_text("0 262144 0.01\n1 262144 0.01\n2 1000 0.01\n")
    net = project_platforms.Network(250e6, 20e-6)
    plat = project.write_platform(project_platforms.platform_xml("testbed", 3, net), tmp_path)
    runs = {}
    for name, extra in [("plain", []), ("one", ["1.0"]), ("two", ["2.0"])]:
        args = [*project.node_args(NODE), "--forward", "0.02", "--steps", "4"]
        if extra:
            (tmp_path / name).write_text("\n".join(extra) + "\n")
            args += ["--jitter-samples", str(tmp_path / name)]
        runs[name] = project.mlcsim(plat, 3, [*args, "train", str(tensors)])
    assert runs["one"]["steps"] == runs["plain"]["steps"]
    assert project.mean_step(runs["plain"]) >= 0.05
    assert project.mean_step(runs["two"]) >= 0.1  # twice the compute, 0.05 s a step


def test_jitter_options(tmp_path):
    cal = {"jitter": {"step_over_mean": [0.9, 1.0, 1.1]}}
    args, steps = project.jitter_args("measured", cal, tmp_path)
    assert args[0] == "--jitter-samples" and steps == 1 + project.JITTER_STEPS
    assert Path(args[1]).read_text().split() == ["0.9", "1.0", "1.1"]
    assert project.jitter_args("0", cal, tmp_path) == (["--jitter", "0.0"], 2)
    assert project.jitter_args("0.02", cal, tmp_path)[1] == 1 + project.JITTER_STEPS
    assert project.jitter_args("0.02", cal, tmp_path, 7)[1] == 8


def test_a_jittered_efficiency_comes_with_its_standard_error():
    sim = {"steps": [{"end_s": e} for e in (1.0, 2.0, 4.0, 5.0, 7.0)]}  # steps 1, 2, 1, 2
    assert project.step_times(sim) == [1.0, 2.0, 1.0, 2.0]
    # efficiency 1.5 / 1.5; sd of the steps 0.577, over sqrt(4) and the mean 1.5: 0.192
    assert project.efficiency_se(1.5, project.step_times(sim)) == pytest.approx(0.19245, rel=1e-4)
    assert project.efficiency_se(1.5, [1.5]) is None


def test_the_calibrations_step_times_are_each_over_their_runs_mean():
    spread = project.step_time_spread()
    ratios = spread["step_over_mean"]
    assert len(ratios) == sum(
        len(project.json.loads(f.read_text())["step_ms"]) for f in project.STEP_TIMES
    )
    assert abs(sum(ratios) / len(ratios) - 1) < 1e-3
    assert ratios == sorted(ratios) and ratios[0] > 0
    # model/calibration.json holds exactly these: it was written from the files here.
    assert project.load_calibration()["jitter"]["step_over_mean"] == ratios


def test_a_send_s_cpu_runs_while_its_bytes_move(built):
    # The kernel's TCP CPU per byte (the test bed's, 0.36 ns/B) charged before each transfer
    # stalled every ring step, and the 3-node ring came out 4 % slower per byte than the 2-
    # and 4-node ones. Running it beside the transfer, the ring's bus bandwidth is the same
    # at every node count.
    node = {**NODE, "cpu_per_byte_s": 3.6e-10, "reduce_bytes_per_s": 1e10}
    size = 16 * MIB
    busbw = []
    for n in (2, 3, 4):
        net = project_platforms.Network(278e6, 4e-6)
        with tempfile.TemporaryDirectory() as d:
            plat = project.write_platform(
                project_platforms.platform_xml("testbed", n, net), Path(d)
            )
            out = project.mlcsim(plat, n, [*project.node_args(node), "sweep", str(size)])
        busbw.append(size * 2 * (n - 1) / n / out["rows"][0]["time_s"])
    assert max(busbw) / min(busbw) < 1.01, busbw


@pytest.mark.parametrize("nodes,seal_sends", [(2, 1), (3, 2), (4, 2), (5, 3)])
def test_a_keyed_group_is_sealed_each_step(built, tmp_path, nodes, seal_sends):
    # These three tensors take 3 ring calls a step, 2(n-1) sends each on rank 0; after
    # them lane 0 seals the group: a recursive-doubling minimum, log2(p) sends on rank 0,
    # one more where a folded rank hands it its flag.
    tensors = tmp_path / "t.txt"
    tensors.write_text("1 262144 0.01\n0 262144 0.01\n2 1000 0.01\n")
    net = project_platforms.Network(250e6, 20e-6)
    plat = project.write_platform(project_platforms.platform_xml("testbed", nodes, net), tmp_path)
    sent = []
    for steps in (2, 3):
        args = [*project.node_args(NODE), "--forward", "0.02", "--steps", str(steps)]
        sent.append(
            project.mlcsim(plat, nodes, [*args, "train", str(tensors)])["data_messages_per_rank"]
        )
    assert sent[1] - sent[0] == 3 * 2 * (nodes - 1) + seal_sends


def test_a_modelled_steps_compute_is_local_plus_what_backprop_cost_more_in_that_run():
    summary = {
        "local": {"step_median_ms": {"median": 74.0}, "cpu_ms_per_step_2": {"tf_Compute": 71.5}},
        "mlcomm-sync": {"cpu_ms_per_step_2": {"tf_Compute": 80.0}},
        "mlcomm-pipe": {"cpu_ms_per_step_2": {"tf_Compute": 71.5}},
    }
    assert project.train_compute_s(summary, "mlcomm-sync") == pytest.approx(0.0825)
    assert project.train_compute_s(summary, "mlcomm-pipe") == pytest.approx(0.074)
