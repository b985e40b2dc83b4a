"""tf_cnn_benchmarks support: `--variable_update=ps_ml_comm` on the unmodified upstream script.

`python -m ml_comm.tfcnn path/to/tf_cnn_benchmarks.py [flags...]` (__main__.py) runs the
script with an import hook (importhook.py) that looks at module names only; when a module
named `benchmark_cnn` is imported, it loads it as usual and then patch.py extends it in
place:

- flagspecs.py: `ps_ml_comm` joins the `--variable_update` choices and the
  `--number_ml_comm_threads` / `--ml_comm_*` flags join the parameter table,
  before tf_cnn_benchmarks.py turns that table into command-line flags;
- benchmark.py: a BenchmarkCNN subclass that runs one tower per rank, horovod-style
  (rank-0-only outputs, seeds offset by rank, aggregate images/sec);
- variables.py: a VariableMgrIndependent subclass whose gradients ml_comm averages
  over the ranks and whose variables start as rank 0's;
- runtime.py: the job (ranks, local rank, ml_comm's teams).

Nothing here imports TensorFlow until benchmark_cnn is imported; nothing of ml_comm runs
in a Python started otherwise.
"""

MODE = "ps_ml_comm"
