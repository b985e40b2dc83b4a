"""ml_comm: gradient aggregation for data-parallel training over MPI.

```
import ml_comm as mc
mc.init(nthread_per_team=2, nteams=1, msglen=model_parameter_count)
mc.broadcast(weights, 0)
grads = mc.gradients(grads, team=0)
mc.finalize()
```
"""

from importlib.util import find_spec as _find_spec

from .core.missing_core import missing_core_message
from .mpi.library import missing_mpi_message

try:  # the C core; the loader must find a libmpi for it
    from . import _core  # noqa: F401
except ImportError as _exc:
    if _find_spec(f"{__name__}._core") is None:  # not compiled: a checkout's source folder
        raise ImportError(missing_core_message(__path__[0])) from _exc
    if "mpi" not in str(_exc).lower():
        raise
    raise ImportError(missing_mpi_message(_exc)) from _exc

from .api import (  # noqa: E402
    ALG_AUTO,
    ALG_RABENSEIFNER,
    ALG_RECURSIVE_DOUBLING,
    ALG_RING,
    allgather,
    allreduce,
    allreduce_sum,
    alltoall,
    average,
    barrier,
    broadcast,
    catch_stop_signals,
    check_buffers_match,
    config_team,
    finalize,
    get_nranks,
    get_rank,
    gradients,
    init,
    reducescatter,
    request_stop,
    should_stop,
    step,
    team_settings,
    team_stats,
    version_info,
)
from .core.version import VERSION as __version__  # noqa: E402, F401
from .errors import MLCommError  # noqa: E402
from .mpi.init import init_mpi  # noqa: E402

# In the order the API reference lists them: the life cycle and the training calls first.
__all__ = [
    "init",
    "finalize",
    "get_rank",
    "get_nranks",
    "broadcast",
    "gradients",
    "step",
    "config_team",
    "barrier",
    "average",
    "allreduce_sum",
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "check_buffers_match",
    "catch_stop_signals",
    "should_stop",
    "request_stop",
    "team_settings",
    "team_stats",
    "init_mpi",
    "version_info",
    "MLCommError",
    "ALG_AUTO",
    "ALG_RING",
    "ALG_RECURSIVE_DOUBLING",
    "ALG_RABENSEIFNER",
]
