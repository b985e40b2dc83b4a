"""A DistributedDataParallel step with ResNet-50's gradients (161 tensors, 25.6 M float32
parameters, torchvision's layout): DDP's backward with ml_comm's bucket hook against DDP
over gloo, the two models alternating step by step in one run (each step after a
barrier); median step time of each and their ratio, the slowest rank's.

    .venv-torch/bin/mpiexec -n 2 .venv-torch/bin/python -P benchmarks/ddp_step.py
    srun -N 2 --ntasks-per-node=1 --mpi=pmi2 .venv-torch/bin/python -P benchmarks/ddp_step.py

The step's compute is as small as can be (every gradient is the step's input scalar c),
so the step time is DDP's communication; c = rank + 1 + step, so every bucket's average
is exact and is checked after the last step on both models.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import ml_comm as mc
import ml_comm.torch as mt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alternating import report  # noqa: E402


def resnet50_counts() -> list[int]:
    """ResNet-50's 161 parameter tensors' sizes (torchvision's layout, 25,557,032 in all), in
    model order: each convolution's weight and its batch norm's two vectors, then the
    classifier's."""
    convs: list[tuple[int, int, int]] = [(3, 64, 7)]  # (in, out, kernel)
    width_in = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            convs += [(width_in, width, 1), (width, width, 3), (width, width * 4, 1)]
            if block == 0:
                convs.append((width_in, width * 4, 1))  # the downsample branch
            width_in = width * 4
    counts: list[int] = []
    for i, o, k in convs:
        counts += [i * o * k * k, o, o]
    return counts + [2048 * 1000, 1000]


class Gradients(torch.nn.Module):
    """Parameters of the given sizes whose gradient is the input scalar c, each."""

    def __init__(self, counts: list[int]):
        super().__init__()
        self.tensors = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(n)) for n in counts)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return sum((p * c).sum() for p in self.tensors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    parser.add_argument("--json", help="write the figures here (rank 0)")
    args = parser.parse_args()
    counts = resnet50_counts()
    mc.init(2, 1, sum(counts))
    mt.init_process_group()
    rank, nranks = mc.get_rank(), mc.get_nranks()
    comm = mc.init_mpi().COMM_WORLD
    torch.set_num_threads(1)
    models = {}
    for name in ("ml_comm", "gloo"):
        model = torch.nn.parallel.DistributedDataParallel(
            Gradients(counts), bucket_cap_mb=args.bucket_mb
        )
        if name == "ml_comm":
            mt.register_ddp_hook(model)
        models[name] = model
    times: dict[str, list[float]] = {name: [] for name in models}
    for step in range(args.warmup + args.steps):
        c = torch.tensor(float(rank + 1 + step))
        for name, model in models.items():
            model.zero_grad(set_to_none=False)
            comm.Barrier()
            start = time.perf_counter()
            model(c).backward()
            seconds = time.perf_counter() - start
            if step >= args.warmup:
                times[name].append(seconds)
    last = args.warmup + args.steps - 1
    want = (nranks + 1) / 2 + last  # the average of rank + 1 + step
    wrong = {
        name: sum(int((p.grad != want).sum()) for p in model.module.tensors)
        for name, model in models.items()
    }
    header = [
        "DDP step (backward) with ResNet-50's gradients: ml_comm's hook vs gloo",
        f"ranks {nranks}, torch {torch.__version__}, {len(counts)} tensors, "
        f"{sum(counts)} float32, bucket_cap_mb {args.bucket_mb}",
        f"{args.steps} steps each after {args.warmup} warm-up, alternating; median, the "
        "slowest rank's",
    ]
    wrong = report(comm, mc.init_mpi(), times, wrong, "gloo", header, args.json)
    mt.destroy_process_group()
    mc.finalize()
    return 0 if not any(wrong.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
