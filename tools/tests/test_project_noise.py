"""The scale model's node terms in Python (tools/project_noise.py, project_profile.py,
project_runs.py): the noise's structure, the test bed's trace replayed in blocks of its
own sequences, the backward profiles' totals, and the bands. No SimGrid needed."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import project_noise as noise  # noqa: E402
import project_profile as profiles  # noqa: E402
import project_runs as runs  # noqa: E402


def test_no_noise_is_all_ones():
    assert noise.factors(noise.Noise(), 3, 5, seed=1) == [[1.0] * 5] * 3


def test_a_nodes_speed_holds_for_the_run():
    rows = noise.factors(noise.Noise(node_sd=0.05), 50, 6, seed=2)
    assert all(len(set(row)) == 1 for row in rows)  # the same factor every step
    assert len({row[0] for row in rows}) == 50  # and its own on every node
    assert statistics.pstdev(row[0] for row in rows) == pytest.approx(0.05, rel=0.3)


def test_a_run_factor_is_shared_by_every_node():
    rows = noise.factors(noise.Noise(run_sd=0.05), 20, 4, seed=3)
    assert len({x for row in rows for x in row}) == 1
    again = noise.factors(noise.Noise(run_sd=0.05), 20, 4, seed=4)
    assert again[0][0] != rows[0][0]


def test_detours_last_their_block_and_share_their_common_part():
    n, steps = 400, 12
    blocked = noise.Noise(detour_mean=0.01, detour_block=4)
    rows = noise.factors(blocked, n, steps, seed=5)
    for row in rows:  # one draw per block of 4 steps
        assert row[0] == row[3] and row[4] == row[7] and row[8] == row[11]
    assert statistics.fmean(x - 1 for row in rows for x in row) == pytest.approx(0.01, rel=0.15)
    # fully shared: every node has the same detour in a block, another in the next
    shared = noise.factors(noise.Noise(detour_mean=0.01, detour_shared=1.0), n, steps, seed=6)
    assert all(len({row[s] for row in shared}) == 1 for s in range(steps))
    assert len({shared[0][s] for s in range(steps)}) == steps


def test_the_hpc_detours_give_the_plugins_sustained_over_peak_at_1024_nodes():
    # The mean over steps of the slowest of 1,024 nodes' detours: 115/111 - 1.
    rows = noise.factors(noise.Noise(detour_mean=noise.DETOUR_MEAN_HPC), 1024, 400, seed=7)
    worst = [max(rows[r][s] for r in range(1024)) for s in range(400)]
    assert statistics.fmean(worst) == pytest.approx(115 / 111, rel=0.005)


def test_parts_switch_off_one_at_a_time():
    hpc = noise.PRESETS["hpc"]
    assert hpc.without("node").node_sd == 0 and hpc.without("node").detour_mean > 0
    assert hpc.without("detour").detour_mean == 0 and hpc.without("detour").node_sd > 0
    assert hpc.without("all").off and not hpc.off
    with pytest.raises(ValueError, match="no noise part"):
        hpc.without("cosmic rays")


def test_the_trace_is_replayed_in_blocks_of_its_own_runs():
    runs_measured = noise.trace_runs()
    run_factors = noise.trace_run_factors()
    rows = noise.factors(noise.Noise(trace=True, trace_block=10), 4, 30, seed=8)
    for pair in (0, 2):
        for b0 in range(0, 30, 10):
            first = rows[pair][b0 : b0 + 10]
            second = rows[pair + 1][b0 : b0 + 10]
            # some measured run and start give both nodes' blocks, times the run factor
            found = False
            for measured in runs_measured:
                for start in range(len(measured[0]) - 9):
                    a, b = measured[0][start : start + 10], measured[1][start : start + 10]
                    ratio = first[0] / a[0]
                    if any(abs(ratio - f) < 1e-9 for f in run_factors) and all(
                        abs(x - ratio * y) < 1e-6 for x, y in zip(first + second, a + b)
                    ):
                        found = True
            assert found, f"ranks {pair},{pair + 1} steps {b0}-{b0 + 9} are not a measured block"


def test_the_reference_node_draws_its_own_noise():
    hpc = noise.PRESETS["hpc"]
    assert noise.reference_step_factor(noise.Noise(), 4, seed=1) == 1.0
    assert noise.reference_step_factor(hpc, 4, seed=1) != noise.reference_step_factor(hpc, 4, 2)


def test_band_is_the_5_and_95_percent_points():
    assert runs.band([0.5]) == (0.5, 0.5)
    lo, hi = runs.band([float(x) for x in range(21)])  # 0..20
    assert (lo, hi) == (1.0, 19.0)


def profile_file(tmp_path: Path, monkeypatch) -> None:
    # 3 variables in keras' order; backprop produces the last first.
    data = {
        "step_s": {"median": 10.0},
        "backward_s": {"median": 6.0},
        "tensor_list": [
            {"path": "a/kernel", "elements": 10000, "arrival_s": 6.0, "backward_flops": 3.0},
            {"path": "a/bias", "elements": 10, "arrival_s": 6.0, "backward_flops": 0.0},
            {"path": "b/kernel", "elements": 20000, "arrival_s": 2.0, "backward_flops": 1.0},
        ],
    }
    (tmp_path / "layer_profile_toy.json").write_text(json.dumps(data))
    monkeypatch.setattr(profiles, "RESULTS", tmp_path)


def test_profiles_split_a_targets_step_as_the_cpu_did(tmp_path, monkeypatch):
    profile_file(tmp_path, monkeypatch)
    measured = profiles.schedule("toy", "measured", 1.0)
    # backward is 60 % of the CPU's step: 0.6 s of 1 s, 0.2 before b/kernel, 0.4 more to a
    assert measured.forward_s == pytest.approx(0.4)
    # (layout index, elements) in arrival order; ties in reverse variable order
    assert [(i, c) for i, c, _ in measured.lines] == [(0, 20000), (1, 10), (2, 10000)]
    assert [t for _, _, t in measured.lines] == pytest.approx([0.2, 0.4, 0.0])
    flops = profiles.schedule("toy", "flops", 1.0)
    assert [t for _, _, t in flops.lines] == pytest.approx([0.15, 0.0, 0.45])
    equal = profiles.schedule("toy", "equal", 1.0)
    assert equal.forward_s == pytest.approx(1 / 3)
    assert [t for _, _, t in equal.lines] == pytest.approx([1 / 3, 0.0, 1 / 3])
    assert measured.counts == flops.counts == [20000, 10, 10000]


def test_terms_switch_off_one_at_a_time():
    case = runs.Case(
        platform="roce25", nodes=4, model="toy", step_s=1.0, ranks_per_node=4,
        pcie_bps=1e10, noise=noise.PRESETS["hpc"], interference=0.1,
    )  # fmt: skip
    assert runs.without(case, "profile").profile == "equal"
    assert runs.without(case, "copies").pcie_bps == 0
    assert runs.without(case, "interference").interference == 0
    own = runs.without(case, "shared_nic")
    assert (own.nodes, own.ranks_per_node, own.ranks) == (16, 1, 16)
    off = runs.without(case, "all")
    assert off.noise.off and off.profile == "equal" and off.pcie_bps == 0 and off.ranks == 16
    assert off.deterministic and not case.deterministic


def test_spare_nodes_leave_the_slowest_out():
    plain = noise.Noise(node_sd=0.02)
    spared = noise.Noise(node_sd=0.02, spare=0.25)
    n = 400
    slowest = [max(r[0] for r in noise.factors(plain, n, 1, seed=s)) for s in range(5)]
    kept = [max(r[0] for r in noise.factors(spared, n, 1, seed=s)) for s in range(5)]
    # The fastest 400 of 500 end near the 80th percentile (1 + 0.84 sd), where all 400
    # reach the largest of 400 draws (about 1 + 3 sd, 2.4 at least in these).
    assert max(kept) < 1 + 1.3 * 0.02 < 1 + 2.2 * 0.02 < min(slowest)
    # The reference node (one node alone) is any node, not a chosen one.
    assert noise.reference_step_factor(spared, 3, 7) == noise.reference_step_factor(plain, 3, 7)
