"""SimGrid platform files for the scale model: hosts node-0 .. node-(N-1), one rank each.

testbed   the test bed: one core per node, each node's link shaped to the calibrated rate
          both ways (SPLITDUPLEX: tc tbf on both ends of each veth), a bridge that never
          limits (a backbone far faster than the links).
aries     Cray XC's dragonfly (docs/scale.md, "Platforms and calibration"): 4 nodes per router, 16
          routers per chassis (1 link each pair), 6 chassis per group (3 links), groups
          of 384 nodes joined by `blue` cables; SimGrid 3.32 routes minimally.
fattree   100 Gbit/s EDR InfiniBand, two levels of 32-port leaves up to 1,024 nodes, three
          levels of 16 beyond.
roce25    Horovod's published benchmark network: 25 Gbit/s per server (RoCE), a switch
          that never limits (the fabric is not described), ranks of one server joined
          by PCIe Gen3 x16 (the loopback).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HEAD = (
    "<?xml version='1.0'?>\n"
    '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n'
    '<platform version="4.1">\n'
)


@dataclass
class Network:
    """A platform's network: a link's rate (bytes/s per direction) and latency (s)."""

    bytes_per_s: float
    latency_s: float


ARIES = Network(9.7e9, 100e-9)  # per-flow MPI streaming rate; ~100 ns per router hop
EDR = Network(12.5e9, 100e-9)  # 4X EDR data rate; CODES' 60 ns router delay, rounded up
ROCE25 = Network(25e9 / 8, 100e-9)  # the line rate Horovod's benchmark states
PCIE_GEN3_X16_BPS = 11.7e9  # bandwidthTest on a P100 (project_targets: [MW])
NODES_PER_ARIES_GROUP = 384
MAX_BLUE_LINKS_SIMGRID_RUNS = 8


def cluster(
    topology: str,
    params: str,
    nodes: int,
    net: Network,
    speed: str,
    cores: int,
    loopback_bps: float = 100e9,
) -> str:
    topo = f' topology="{topology}" topo_parameters="{params}"' if topology else ""
    backbone = "" if topology else ' bb_bw="1000GBps" bb_lat="0us"'
    return (
        f'<zone id="world" routing="Full">\n'
        f'<cluster id="c" prefix="node-" suffix="" radical="0-{nodes - 1}" speed="{speed}"'
        f' core="{cores}" bw="{net.bytes_per_s:.6g}Bps" lat="{net.latency_s:.6g}s"'
        f' sharing_policy="SPLITDUPLEX"{backbone}{topo}'
        f' loopback_bw="{loopback_bps:.6g}Bps" loopback_lat="0us"/>\n</zone>\n</platform>\n'
    )


def aries_params(nodes: int) -> tuple[str, int]:
    """DRAGONFLY parameters for at least `nodes` hosts, and the host count they make."""
    groups = max(1, math.ceil(nodes / NODES_PER_ARIES_GROUP))
    if groups > 16:
        raise ValueError("SimGrid 3.32's dragonfly takes at most 16 groups (6,144 nodes)")
    # Optical cables per group pair: 240 per group shared by the others, as links of
    # the base rate (one 12X AOC is 18.75 GB/s; 2 cables per base-rate link, rounded).
    blue = max(1, int(240 / max(1, groups - 1) * 18.75e9 / ARIES.bytes_per_s)) if groups > 1 else 1
    # SimGrid 3.32's max-min solver crashes (SIGSEGV in MaxMin::do_solve) on dragonflies
    # with many links per group pair once traffic between groups is heavy (3 groups and
    # 16 links; 2 groups and 463 in an allreduce sweep at 512 nodes). 8 runs. At 512 nodes
    # 463 links and 8 give the same training step times to 5 digits for ml_comm and the
    # allreduce-after-backprop baseline: both send 1/n of the bytes between groups at
    # power-of-two node counts (docs/scale.md).
    blue = min(blue, MAX_BLUE_LINKS_SIMGRID_RUNS)
    return f"{groups},{blue};6,3;16,1;4", groups * NODES_PER_ARIES_GROUP


def fattree_params(nodes: int) -> tuple[str, int]:
    if nodes <= 1024:
        leaves = max(1, math.ceil(nodes / 32))
        return f"2;32,{leaves};1,32;1,1", 32 * leaves
    return "3;16,16,16;1,16,16;1,1,1", 4096


def simgrid_cfg(kind: str) -> list[str]:
    """SimGrid options a platform needs besides the model's own. The target networks move
    bytes by RDMA (Aries, InfiniBand, RoCE): no TCP acknowledgements flow back, so no
    cross-traffic (SimGrid adds a share of each flow in the reverse direction, for TCP);
    leaving it out also spares the solver a third of a large run's time. The test bed's
    links are TCP and keep it."""
    return [] if kind == "testbed" else ["--cfg=network/crosstraffic:0"]


def platform_xml(kind: str, nodes: int, net: Network | None = None, cores: int = 1) -> str:
    """The platform file's text for `nodes` hosts (a topology may hold more)."""
    speed = "1Gf"
    if kind == "testbed":
        assert net is not None
        return HEAD + cluster("", "", nodes, net, speed, cores)
    if kind == "aries":
        params, hosts = aries_params(nodes)
        return HEAD + cluster("DRAGONFLY", params, hosts, net or ARIES, speed, cores)
    if kind == "fattree":
        params, hosts = fattree_params(nodes)
        return HEAD + cluster("FAT_TREE", params, hosts, net or EDR, speed, cores)
    if kind == "roce25":
        return HEAD + cluster("", "", nodes, net or ROCE25, speed, cores, PCIE_GEN3_X16_BPS)
    raise ValueError(f"unknown platform {kind!r} (testbed, aries, fattree, roce25)")
