"""`horovod.keras` on ml_comm: the names of ml_comm.horovod.tensorflow.keras, and
PartialDistributedOptimizer."""

from ..tensorflow.keras import *  # noqa: F403
from ..tensorflow.keras import K, callbacks, elastic  # noqa: F401
from ..tensorflow.keras import __all__ as _tensorflow_keras_names
from ..training import PartialDistributedOptimizer

__all__ = [*_tensorflow_keras_names, "PartialDistributedOptimizer"]
