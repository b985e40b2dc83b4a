"""The NumPy path: gradients, reductions and broadcasts of NumPy arrays, their requests,
buffers, the results' pool (in C: _numpy_glue.c) and the pipelined teams' stages.
Above core/ and faults/; loads no framework."""
