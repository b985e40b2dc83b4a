"""Horovod 0.28.1's TensorFlow API on ml_comm (docs/horovod.md).

    import ml_comm.horovod.tensorflow as hvd          # was: import horovod.tensorflow as hvd
    import ml_comm.horovod.tensorflow.keras as hvd    # was: import horovod.tensorflow.keras as hvd

`python -m ml_comm.horovod script.py args...` runs an unchanged Horovod script, its
`horovod.*` imports answered by this package.
"""
