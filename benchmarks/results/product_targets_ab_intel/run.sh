#!/bin/bash
# The TensorFlow op's four product-target cases on an Intel Xeon host, code against code:
# 18da118 (the code of the Intel run in results/product_targets/) as A, this checkout as B.
# A's build, beside the tree's .venv:
#   git worktree add /tmp/abIntel 18da118
#   (cd /tmp/abIntel && ML_COMM_MPICC=$PWD/.venv/bin/mpicc \
#       $PWD/.venv/bin/python setup.py -q build_ext --inplace)   # $PWD: this checkout
exec bash "$(dirname "$0")/../product_targets_ab/run.sh" /tmp/abIntel \
  benchmarks/results/product_targets_ab_intel tfmem
