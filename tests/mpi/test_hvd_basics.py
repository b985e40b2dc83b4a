"""ml_comm.horovod's process queries: init is idempotent, ranks
and node-local ranks agree with MPI's, the build flags answer what ml_comm is, and
every rank's queries agree. The rules of mpi_helpers.py hold."""

from __future__ import annotations

import pytest
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks, comm_world

import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi


def test_ranks_and_sizes(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    world = comm_world()
    hvd.init()  # idempotent
    c.true(hvd.is_initialized(), "is_initialized")
    c.true((hvd.rank(), hvd.size()) == (world.rank, world.size), "rank/size are MPI's")
    c.true(hvd.local_size() * hvd.cross_size() == n, "local_size * cross_size == size")
    c.true(0 <= hvd.local_rank() < hvd.local_size(), "local_rank in range")
    c.true(hvd.cross_rank() < hvd.cross_size(), "cross_rank in range")
    c.true(hvd.is_homogeneous(), "one node: homogeneous")
    c.true(int(hvd.rank_op()) == rank and int(hvd.size_op()) == n, "rank_op/size_op")
    c.true(hvd.mpi_built() and hvd.mpi_enabled(), "MPI built and enabled")
    c.true(
        not any(
            f()
            for f in (
                hvd.gloo_built,
                hvd.gloo_enabled,
                hvd.nccl_built,
                hvd.ddl_built,
                hvd.ccl_built,
                hvd.cuda_built,
                hvd.rocm_built,
            )
        ),
        "no gloo/nccl/ddl/ccl/cuda/rocm",
    )
    c.true(isinstance(hvd.mpi_threads_supported(), bool), "mpi_threads_supported is a bool")
    c.finish()


def test_every_public_name_is_in_the_static_all():
    """The API reference reads __all__ statically: it must hold every public name (the
    submodules aside) and nothing the module lacks."""
    import types

    import ml_comm.horovod.keras as hvd_keras
    import ml_comm.horovod.tensorflow.keras as hvd_tf_keras
    import ml_comm.horovod.tensorflow.keras.callbacks as callbacks

    for module in (hvd, hvd_tf_keras, callbacks, hvd_keras):
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and not isinstance(value, types.ModuleType)
            and getattr(value, "__module__", "ml_comm").startswith("ml_comm")
        }
        assert set(module.__all__) == public - {"annotations"}, module.__name__
    for name in ("DistributedOptimizer", "DistributedGradientTape", "broadcast_variables"):
        assert name in hvd.__all__
