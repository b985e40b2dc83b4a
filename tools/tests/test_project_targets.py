"""The targets' NCCL latency follows NCCL's own model of its ring (tools/project_targets.py,
[NCCL]): steps inside a server at the PCIe figure, steps between servers at the network's,
and the plateau factor only where the ring leaves a server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import project_targets as targets  # noqa: E402


def test_t2_ring_of_512_gpus_on_128_servers():
    # 1,022 steps: 254 between servers, 768 inside them; times 1.9 on Pascal
    allreduce_us = 1.9 * (8.4 + 768 * 5.7 + 254 * 14.0)
    assert targets.nccl_ring_step_s(512, 128) * 1022 == pytest.approx(allreduce_us * 1e-6)
    assert targets.T2[0].overhead_s == pytest.approx(allreduce_us * 1e-6 / 1022 / 4)


def test_one_rank_a_server_crosses_the_network_at_every_step():
    assert targets.nccl_ring_step_s(1024, 1024) * 2046 == pytest.approx(
        1.9 * (8.4 + 2046 * 14.0) * 1e-6
    )


def test_one_server_has_no_network_steps_and_no_plateau():
    assert targets.nccl_ring_step_s(4, 1) * 6 == pytest.approx((8.4 + 6 * 5.7) * 1e-6)
