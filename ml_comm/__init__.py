"""ml_comm: gradient aggregation for data-parallel training over MPI.

import ml_comm as mc
mc.init(nthread_per_team=2, nteams=1, msglen=model_parameter_count)
mc.broadcast(weights, 0)
grads = mc.gradients(grads, team=0)
mc.finalize()
"""

from ._mpi import init_mpi
from .api import (
    ALG_AUTO,
    ALG_RECURSIVE_DOUBLING,
    ALG_RING,
    allreduce_sum,
    average,
    barrier,
    broadcast,
    check_buffers_match,
    config_team,
    finalize,
    get_nranks,
    get_rank,
    gradients,
    init,
    team_settings,
    team_stats,
    version_info,
)
from .errors import MLCommError
from .stop import catch_stop_signals, request_stop, should_stop

__version__ = "0.1.0"

__all__ = [
    "ALG_AUTO",
    "ALG_RECURSIVE_DOUBLING",
    "ALG_RING",
    "MLCommError",
    "allreduce_sum",
    "average",
    "barrier",
    "broadcast",
    "catch_stop_signals",
    "check_buffers_match",
    "config_team",
    "finalize",
    "get_nranks",
    "get_rank",
    "gradients",
    "init",
    "init_mpi",
    "request_stop",
    "should_stop",
    "team_settings",
    "team_stats",
    "version_info",
]
