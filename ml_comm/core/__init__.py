"""The lowest layer: one init()..finalize() session (communicator, C context, teams,
settings), the framework backends' registry, the C core's dtypes and status codes, the
settings read from the environment and compared across ranks, reports and timelines,
and the cffi builder of the C core (ml_comm._core). It imports no other ml_comm layer."""
