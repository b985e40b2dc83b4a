"""`horovod.keras` on ml_comm: the same names as ml_comm.horovod.tensorflow.keras."""

from ..tensorflow.keras import *  # noqa: F403
from ..tensorflow.keras import __all__, callbacks, elastic  # noqa: F401
