"""Published training-scaling measurements the scale model must reproduce before it
projects (docs/scale.md, "Reproduction"). Each target's conditions are fixed here,
from the publications, before it is run; nothing in them is fitted to its figure.

Sources (full references in docs/scale.md):
  [DLP]  Mendygral et al., "High Performance Scalable Deep Learning with the Cray
         Programming Environments Deep Learning Plugin", CUG 2018: Fig. 1 and text.
  [HVD]  horovod/horovod README.rst and docs/benchmarks.rst (the 512-GPU chart, 2018);
         docs/tensor-fusion.rst (64 MB fusion buffer); horovod/common/operations.cc
         (5 ms cycle time before horovod#2468).
  [TFB]  tensorflow/docs site/en/r1/guide/performance/benchmarks.md: tf_cnn_benchmarks on
         a DGX-1's P100, synthetic data, May 2017 (images/s per GPU).
  [NCCL] NVIDIA/nccl src/graph/tuning.cc (5067397c, 2026-06): NCCL's model of a ring
         allreduce's latency with the Simple protocol (the only one NCCL 2 had in 2018):
         8.4 us, plus 5.7 us a step over PCI and 14.0 us a step over the network, times
         1.9 for GPUs before Ampere (its "plateau effect of ring") on multi-node buffers
         of 64 B or more per rank. The 2019 file (299c554d) had 6.6 us a step over the
         network for every step and no such factor.
  [MW]   Microway, "NVIDIA Tesla P100 PCI-E 16GB GPU Accelerator (Pascal GP100) Up
         Close" (2016): bandwidthTest, pinned 32 MiB, 11.7 GB/s to and 12.9 from the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import project_platforms as platforms

# [TFB]: images/s of one P100 at batch 64 (synthetic data).
P100_IMAGES_PER_S = {"inception3": 142.0, "resnet50": 219.0, "resnet152": 91.8, "vgg16": 154.0}
# [TFB] has no ResNet-101: its step between ResNet-50's and ResNet-152's in proportion to
# forward GFLOPs per image (torchvision: 4.09, 7.80, 11.51).
RESNET_GFLOPS = {"resnet50": 4.09, "resnet101": 7.80, "resnet152": 11.51}


def p100_step_s(model: str, batch: int = 64) -> float:
    """One P100's training step at batch 64, from [TFB] (ResNet-101 derived)."""
    if model == "resnet101":
        lo = batch / P100_IMAGES_PER_S["resnet50"]
        hi = batch / P100_IMAGES_PER_S["resnet152"]
        g = RESNET_GFLOPS
        return lo + (hi - lo) * (g["resnet101"] - g["resnet50"]) / (g["resnet152"] - g["resnet50"])
    return batch / P100_IMAGES_PER_S[model]


PCIE_GEN3_P100_BPS = platforms.PCIE_GEN3_X16_BPS  # [MW]: the slower direction (to the GPU)
NCCL_RING_BASE_S = 8.4e-6  # [NCCL]
NCCL_RING_STEP_PCI_S = 5.7e-6  # [NCCL]
NCCL_RING_STEP_NET_S = 14.0e-6  # [NCCL]
NCCL_RING_PLATEAU_BEFORE_AMPERE = 1.9  # [NCCL]


def nccl_ring_step_s(ranks: int, servers: int) -> float:
    """[NCCL]'s latency of one ring allreduce of a fused buffer on Pascal GPUs (Simple
    protocol), spread evenly over its 2 (n - 1) steps: the model's ring pays it step by
    step, as a per-message cost."""
    steps = 2 * (ranks - 1)
    across = 2 * (servers - 1)
    latency = NCCL_RING_BASE_S + (steps - across) * NCCL_RING_STEP_PCI_S
    latency += across * NCCL_RING_STEP_NET_S
    if servers > 1:
        latency *= NCCL_RING_PLATEAU_BEFORE_AMPERE
    return latency / steps


# [MW]: a P100's HBM2 moves up to 732 GB/s; a sum reads two vectors and writes one.
P100_SUM_BPS = 732e9 / 3


@dataclass(frozen=True)
class Target:
    """One published figure and the conditions it was measured in."""

    name: str
    model: str
    published: float
    source: str
    platform: str  # project_platforms kind
    nodes: int  # servers
    ranks_per_node: int
    step_s: float  # one rank's step alone (no communication), seconds
    scheme: str  # "ml_comm" (the plugin's algorithms: the core's) or "horovod"
    threads: int = 2  # communication threads per rank (ml_comm)
    cores: int = 2  # cores a node leaves to communication
    overhead_s: float = 0.5e-6  # CPU (or GPU) time per message at each end
    pcie_bps: float = 0.0  # host<->device copies in the gradient path (0: none)
    fusion_bytes: float = 64 * 2**20  # Horovod's
    cycle_s: float = 5e-3  # Horovod's
    reduce_bps: float = 0.0  # sums on a GPU at this speed (0: the host CPU's, measured here)
    notes: tuple[str, ...] = field(default_factory=tuple)


T1 = Target(
    name="T1",
    model="inception3",
    published=0.91,
    source="[DLP] Fig. 1 and text: Inception v3 on Piz Daint (Cray XC50, one P100 per "
    "node, Aries), batch 64 per node, synthetic data, 91 % at 512 nodes against one node",
    platform="aries",
    nodes=512,
    ranks_per_node=1,
    step_s=p100_step_s("inception3"),
    scheme="ml_comm",
    threads=4,  # the target's conditions: 4 communication threads
    cores=2,  # [DLP]'s advice: leave 2 cores to the communication threads
    pcie_bps=PCIE_GEN3_P100_BPS,
    notes=(
        "the plugin's own algorithms are not public: the model runs ml_comm's plan and "
        "algorithms on the plugin's threads and copies",
    ),
)


T2_SERVERS, T2_GPUS_PER_SERVER = 128, 4


def t2(model: str, published: float) -> Target:
    return Target(
        name="T2",
        model=model,
        published=published,
        source="[HVD] 128 servers x 4 Pascal GPUs, RoCE-capable 25 Gbit/s network, "
        "tf_cnn_benchmarks batch 64 per GPU, synthetic data: 90 % for Inception V3 and "
        "ResNet-101, 68 % for VGG-16 at 512 GPUs",
        platform="roce25",
        nodes=T2_SERVERS,
        ranks_per_node=T2_GPUS_PER_SERVER,
        step_s=p100_step_s(model),
        scheme="horovod",
        threads=1,
        cores=4,  # NCCL's work is on the GPUs: every rank's message costs in parallel
        # A ring step costs the model one send and one receive at each of two ranks along
        # its chain: a quarter of [NCCL]'s step at each (the links add 0.1 us; the model's
        # step at 4 KiB blocks is printed with the reproduction). Horovod's coordination
        # messages (MPI) are charged the same.
        overhead_s=nccl_ring_step_s(T2_SERVERS * T2_GPUS_PER_SERVER, T2_SERVERS) / 4,
        reduce_bps=P100_SUM_BPS,  # NCCL sums on the GPU
        notes=(
            "NCCL 2's ring over all 512 GPUs (one ring, 4 hops of 4 inside a server), "
            "modelled by the core's ring algorithm at NCCL's per-step latency",
            "copies to the host: none (NCCL reads GPU memory; its staging is pipelined at "
            "PCIe rate, above the 25 Gbit/s link)",
        ),
    )


T2 = [t2("inception3", 0.90), t2("resnet101", 0.90), t2("vgg16", 0.68)]

# T3 (the plugin on Cori KNL, ResNet-50, batch 32, 89 % at 1,024 nodes) needs one KNL
# node's step time, which no source found gives (docs/scale.md): not built.
TARGETS = [T1, *T2]


# Bars (docs/scale.md): T1 within 3 points and inside the band; T2 within 5 points.
def met(target: Target, median: float, lo: float, hi: float) -> bool:
    if target.name == "T1":
        return abs(median - target.published) <= 0.03 and lo <= target.published <= hi
    return abs(median - target.published) <= 0.05
