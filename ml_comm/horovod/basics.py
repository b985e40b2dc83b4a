"""Horovod's process queries on an ml_comm session: init, shutdown, rank, size,
local and cross ranks, and the build-flag queries (docs/horovod.md).

`init` starts an ml_comm session with the TensorFlow backend on the job's
communicator (or the one given) and nothing else: no TensorFlow device is
created (scripts pin GPUs after it), and ml_comm's own Keras hook is never
installed, so gradients are reduced only where the script asks for it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from .. import api as mc
from ..core.errors import StateError
from ..mpi.init import init_mpi

# The names Horovod's tensorflow and keras modules both export.
__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "size",
    "rank",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "is_homogeneous",
    "mpi_threads_supported",
    "mpi_enabled",
    "mpi_built",
    "gloo_enabled",
    "gloo_built",
    "nccl_built",
    "ddl_built",
    "ccl_built",
    "cuda_built",
    "rocm_built",
    "start_timeline",
    "stop_timeline",
]

DEFAULT_MSGLEN = 1 << 22  # float32 elements of the fusion buffer (16 MiB)
DEFAULT_THREADS = 2

# HOROVOD_* variables: the ones ml_comm has a setting for, and the ones it ignores.
# HOROVOD_FUSION_THRESHOLD (bytes) sizes the fusion buffer, as msglen does (float32 elements).
MAPPED = {"HOROVOD_TIMELINE": "ML_COMM_TIMELINE"}
IGNORED = (
    "HOROVOD_CYCLE_TIME",
    "HOROVOD_TIMELINE_MARK_CYCLES",
    "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_HIERARCHICAL_ALLREDUCE",
    "HOROVOD_HIERARCHICAL_ALLGATHER",
    "HOROVOD_AUTOTUNE",
    "HOROVOD_AUTOTUNE_LOG",
    "HOROVOD_GPU_OPERATIONS",
    "HOROVOD_GPU_ALLREDUCE",
    "HOROVOD_CPU_OPERATIONS",
    "HOROVOD_STALL_CHECK_TIME_SECONDS",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
    "HOROVOD_LOG_LEVEL",
    "HOROVOD_NUM_NCCL_STREAMS",
    "HOROVOD_THREAD_AFFINITY",
)


@dataclass
class _State:
    started_here: bool
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    homogeneous: bool


_state: _State | None = None


def _communicator(comm):
    """init's comm: None (the whole job), a list of ranks of the job, or an mpi4py
    communicator."""
    mpi = init_mpi()
    if comm is None or isinstance(comm, mpi.Comm):
        return comm
    if isinstance(comm, Sequence) and not isinstance(comm, (str, bytes)):
        world = mpi.COMM_WORLD
        ranks = [int(r) for r in comm]
        bad = [r for r in ranks if not 0 <= r < world.Get_size()]
        if bad or len(set(ranks)) != len(ranks) or not ranks:
            raise ValueError(
                f"init(comm=...): the list must name distinct ranks of the job "
                f"(0..{world.Get_size() - 1}), got {ranks}"
            )
        # Collective over the whole job; a rank outside the list gets COMM_NULL.
        sub = world.Create(world.Get_group().Incl(ranks))
        if sub == mpi.COMM_NULL:
            raise ValueError(
                f"init(comm={ranks}): rank {world.Get_rank()} of the job is not in the list; "
                f"call init only on the listed ranks' side of the job, or leave it out"
            )
        return sub
    raise TypeError(
        f"init(comm=...) takes a list of ranks or an mpi4py communicator, got {type(comm).__name__}"
    )


def _fusion_msglen() -> int:
    raw = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    if raw is None:
        return DEFAULT_MSGLEN
    try:
        return max(1, int(raw) // 4)
    except ValueError:
        raise ValueError(f"HOROVOD_FUSION_THRESHOLD must be a byte count, got {raw!r}") from None


def _apply_environment() -> None:
    """Map the HOROVOD_* variables ml_comm has settings for; warn once about the rest."""
    for name, ours in MAPPED.items():
        if name in os.environ and ours not in os.environ:
            os.environ[ours] = os.environ[name]
    ignored = sorted(name for name in IGNORED if name in os.environ)
    if ignored:
        warnings.warn(
            f"ml_comm.horovod ignores {', '.join(ignored)}: ml_comm has no such setting "
            f"(see docs/horovod.md for what it does instead)",
            stacklevel=3,
        )


def init(comm=None, process_sets=None) -> None:
    """Start the session (collective over comm). Calling it again does nothing."""
    global _state
    if process_sets not in (None, [], ()):
        raise NotImplementedError(
            "init(process_sets=...): ml_comm.horovod has only the global process set; "
            "use ml_comm teams (docs/api.md) to reduce several models independently"
        )
    if _state is not None:
        return
    _apply_environment()
    owns = not mc.is_initialized()
    if owns:
        mc.init(
            DEFAULT_THREADS, 1, _fusion_msglen(), framework="tensorflow", comm=_communicator(comm)
        )
    elif mc.session().backend.name != "tensorflow":
        raise StateError(
            "ml_comm is already initialised with framework="
            f"{mc.session().backend.name!r}; ml_comm.horovod needs framework='tensorflow'"
        )
    current = mc.session()
    mpi = init_mpi()
    node = current.comm.Split_type(mpi.COMM_TYPE_SHARED, key=current.rank)
    local_rank, local_size = node.Get_rank(), node.Get_size()
    cross = current.comm.Split(local_rank, current.rank)
    cross_rank, cross_size = cross.Get_rank(), cross.Get_size()
    sizes = current.comm.allgather(local_size)
    node.Free()
    cross.Free()
    _state = _State(owns, local_rank, local_size, cross_rank, cross_size, len(set(sizes)) == 1)


def shutdown() -> None:
    """End the session that init started (collective). Safe to call twice."""
    global _state
    state, _state = _state, None
    if state is not None and state.started_here:
        mc.finalize()


def is_initialized() -> bool:
    return _state is not None


def _need() -> _State:
    if _state is None:
        raise ValueError("ml_comm.horovod has not been initialized; run hvd.init() first")
    return _state


def session():
    """The ml_comm session under the front end (init must have run)."""
    _need()
    return mc.session()


def size() -> int:
    return session().size


def rank() -> int:
    return session().rank


def local_rank() -> int:
    return _need().local_rank


def local_size() -> int:
    return _need().local_size


def cross_rank() -> int:
    return _need().cross_rank


def cross_size() -> int:
    return _need().cross_size


def is_homogeneous() -> bool:
    return _need().homogeneous


def mpi_threads_supported() -> bool:
    mpi = init_mpi()
    return mpi.Query_thread() == mpi.THREAD_MULTIPLE


def mpi_enabled() -> bool:
    return True


def mpi_built() -> bool:
    return True


def gloo_enabled() -> bool:
    return False


def gloo_built() -> bool:
    return False


def nccl_built() -> int:
    return 0  # ml_comm reduces in host memory over MPI


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    raise NotImplementedError(
        "start_timeline: ml_comm writes its timeline from the start when ML_COMM_TIMELINE "
        'names a file (docs/troubleshooting.md, "Timeline"); set it before hvd.init()'
    )


def stop_timeline() -> None:
    raise NotImplementedError(
        "stop_timeline: ml_comm's timeline (ML_COMM_TIMELINE) ends at hvd.shutdown()"
    )
