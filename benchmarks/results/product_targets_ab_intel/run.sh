#!/bin/bash
# The TensorFlow op's four product-target cases on an Intel Xeon host, code against code:
# 18da118 (the code of the Intel run in results/product_targets/) as A, this checkout as B,
# alternated A B, B A, ... (benchmarks/ab_builds.py --floor: the ratio as
# benchmarks/product_targets.py takes it). A's build, beside the tree's .venv:
#   git worktree add /tmp/abIntel 18da118
#   (cd /tmp/abIntel && ML_COMM_MPICC=$PWD/.venv/bin/mpicc \
#       $PWD/.venv/bin/python setup.py -q build_ext --inplace)   # $PWD: this checkout
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib TF_CPP_MIN_LOG_LEVEL=2
export TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1 # as product_targets.py runs them
R=benchmarks/results/product_targets_ab_intel
ab() { .venv/bin/python benchmarks/ab_builds.py --a /tmp/abIntel --b . --rounds 4 --floor "$@"; }
ab --out $R/resnet50 -- --api tf --shapes resnet50 --tf-floor --seconds-per-size 6 > $R/resnet50.txt
ab --out $R/64x1M -- --api tf --tensors 64 -b 64M -e 64M --tf-floor --seconds-per-size 6 \
  > $R/64x1M.txt
ab --out $R/resnet50-tfmem -- --api tf --shapes resnet50 --tf-floor --mpi-memory tensorflow \
  --seconds-per-size 6 > $R/resnet50-tfmem.txt
ab --out $R/64x1M-tfmem -- --api tf --tensors 64 -b 64M -e 64M --tf-floor \
  --mpi-memory tensorflow --seconds-per-size 6 > $R/64x1M-tfmem.txt
