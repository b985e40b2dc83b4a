"""PyTorch's DistributedDataParallel with ml_comm averaging its gradient buckets.

    pip install ".[torch,mpich]"
    mpiexec -n 2 python examples/torch_ddp.py

Each rank trains on its own rows of a fixed regression problem; DDP starts every rank
from rank 0's weights, ml_comm averages each bucket as backprop fills it, and every rank
ends with the same weights.
"""

import numpy as np
import torch

import ml_comm as mc
import ml_comm.torch as mt

mc.init(nthread_per_team=2, nteams=1, msglen=1 << 16)
mt.init_process_group()  # gloo's group for DDP, from the MPI launch: no MASTER_ADDR
rank, nranks = mc.get_rank(), mc.get_nranks()

torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
model = torch.nn.parallel.DistributedDataParallel(model)
mt.register_ddp_hook(model)  # ml_comm averages the buckets, on team 0
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

rng = np.random.default_rng(0)
x = torch.from_numpy(rng.normal(size=(64 * nranks, 8)).astype(np.float32))
y = x.sum(dim=1, keepdim=True)
mine = slice(rank, None, nranks)  # this rank's rows
for _step in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
    loss.backward()  # the buckets are averaged while backprop runs
    optimizer.step()

weights = [p.detach().numpy() for p in model.parameters()]
assert mc.check_buffers_match(weights) == 0  # the same weights on every rank
if rank == 0:
    print(f"{nranks} ranks: last loss on rank 0's rows {loss.item():.4f}")
mt.destroy_process_group()
mc.finalize()
