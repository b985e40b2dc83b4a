#!/bin/sh
# Communication slowing compute, ml_comm's threads on compute's core or on their own
# (ML_COMM_THREAD_CORES), at 2 ranks on one machine with cores 0 and 1 (shared memory).
# Writes table.txt, results.json and output.txt beside this script; run from the
# repository root. About 5 minutes.
set -e
R=benchmarks/results/thread_cores
.venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/thread_cores.py --rounds 7 --out $R > $R/output.txt
