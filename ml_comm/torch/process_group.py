"""torch.distributed's process group from an MPI launch (`mpiexec -n N`, `srun`).

DDP needs a process group; PyTorch's wheels have no MPI backend
(`torch.distributed.is_mpi_available()` is False), and gloo's rendezvous wants
MASTER_ADDR and MASTER_PORT. Here rank 0 opens the rendezvous store (a TCPStore on a
free port it chooses) and hands its address to the other ranks over MPI: the loopback
address when every rank runs on rank 0's host, else the address rank 0's host name
resolves to (the launch's hosts, as srun and mpiexec name them). Rank and size are
MPI's.
"""

from __future__ import annotations

import math
import numbers
import socket
from datetime import timedelta

import torch.distributed as dist

from ..core.errors import BadArgumentError, MLCommError
from ..core.settings_check import disagreements
from ..mpi.init import init_mpi

LOOPBACK = "127.0.0.1"
# The backends this PyTorch may have, and how it says whether it has each.
_AVAILABLE = {
    "gloo": dist.is_gloo_available,
    "nccl": dist.is_nccl_available,
    "mpi": dist.is_mpi_available,
    "ucc": dist.is_ucc_available,
}


def _argument_problem(backend, timeout_s) -> str:
    """What is wrong with this rank's arguments ("" if nothing): checked on every rank
    before the rendezvous, where a rank that fails alone would leave the others waiting
    for it until their timeout."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        return f"timeout_s must be a number of seconds, got {type(timeout_s).__name__}"
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        return f"timeout_s must be a positive number of seconds, got {timeout_s}"
    try:
        timedelta(seconds=float(timeout_s))
    except OverflowError:
        return f"timeout_s {timeout_s} is beyond what a timedelta holds"
    if backend is None:  # PyTorch's default for each device
        return ""
    # One backend, or one per device ("cpu:gloo,cuda:nccl"); a plugin's is torch's to judge.
    for name in (part.split(":")[-1].strip() for part in str(backend).lower().split(",")):
        if name not in dist.Backend.backend_list:
            return f"backend {backend!r}: PyTorch knows no backend {name!r}"
        if name in _AVAILABLE and not _AVAILABLE[name]():
            have = sorted(b for b, available in _AVAILABLE.items() if available())
            return f"backend {backend!r} is not built into this PyTorch (it has {have})"
    return ""


def _check_arguments(comm, backend, timeout_s) -> None:
    """BadArgumentError on every rank where any rank's arguments are wrong, naming the
    ranks (collective)."""
    problems = comm.allgather(_argument_problem(backend, timeout_s) or "right")
    if set(problems) == {"right"}:
        return
    if len(set(problems)) == 1:
        raise BadArgumentError(f"init_process_group: every rank: {problems[0]}")
    lines = disagreements([{"arguments": p} for p in problems])
    raise BadArgumentError(f"init_process_group: {lines[0]}")


def _rendezvous_host(comm) -> tuple[str, str]:
    """The address of rank 0's host that every rank reaches, or why there is none
    (collective; rank 0's answer is the one that counts, and is broadcast)."""
    hosts = comm.allgather(socket.gethostname())
    if len(set(hosts)) == 1:
        return LOOPBACK, ""
    if comm.rank != 0:
        return "", ""
    try:
        address = socket.gethostbyname(hosts[0])
    except OSError as exc:
        return "", f"rank 0's host name {hosts[0]!r} does not resolve ({exc})"
    if address.startswith("127."):
        return "", (
            f"rank 0's host name {hosts[0]!r} resolves to {address}, a loopback address "
            "that ranks on other hosts cannot reach; name the hosts so that they resolve "
            "to their network addresses (/etc/hosts, DNS)"
        )
    return address, ""


def init_process_group(backend: str | None = "gloo", timeout_s: float = 300.0, comm=None) -> None:
    """Start torch.distributed's default process group over the MPI launch's ranks
    (collective over comm, default MPI's COMM_WORLD)."""
    if dist.is_initialized():
        raise MLCommError("init_process_group: torch.distributed is initialised already")
    comm = comm if comm is not None else init_mpi().COMM_WORLD
    rank, size = comm.rank, comm.size
    _check_arguments(comm, backend, timeout_s)
    host, failure = _rendezvous_host(comm)
    timeout = timedelta(seconds=float(timeout_s))
    store = None
    port = 0
    if rank == 0 and not failure:
        try:
            store = dist.TCPStore(
                host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False
            )
            port = store.port
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it
            failure = f"rank 0 cannot open the rendezvous store: {exc}"
    # Rank 0's failures, too, travel to every rank: the others would wait here for good.
    host, port, failure = comm.bcast((host, port, failure), root=0)
    if failure:
        raise MLCommError(f"init_process_group: {failure}")
    if store is None:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
