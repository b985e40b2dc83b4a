"""PyTorch's DistributedDataParallel over ml_comm's core.

    import ml_comm as mc
    import ml_comm.torch as mt

    mc.init(2, 1, msglen)                       # NumPy framework: the core's teams
    mt.init_process_group()                     # the process group DDP needs, from the MPI launch
    model = torch.nn.parallel.DistributedDataParallel(model)
    mt.register_ddp_hook(model)                 # buckets averaged by ml_comm, not by gloo
    ...                                         # the training loop, unchanged
    mt.destroy_process_group(); mc.finalize()

`init_process_group` (process_group.py) starts torch.distributed's gloo group with the
MPI launch's ranks and a rendezvous address that rank 0 chooses and hands to the others
over MPI: no MASTER_ADDR, MASTER_PORT, RANK or WORLD_SIZE to set. DDP uses it for what
it does besides gradients (the broadcast of rank 0's parameters and buffers when it is
built). `register_ddp_hook` (ddp.py) makes ml_comm average DDP's gradient buckets:
each is submitted to the core as soon as DDP hands it over, so backprop keeps running
while it is reduced, in DDP's bucket order on every rank.
"""

from __future__ import annotations

from .ddp import BucketAverager, register_ddp_hook
from .process_group import destroy_process_group, init_process_group

__all__ = ["BucketAverager", "destroy_process_group", "init_process_group", "register_ddp_hook"]
