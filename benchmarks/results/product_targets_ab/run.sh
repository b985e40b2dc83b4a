#!/bin/bash
# The TensorFlow op's two product targets on the AMD EPYC host, code against code: 65f5bae
# (the code of the earlier AMD run, product_path.md "The three targets on the earlier host")
# as A, this checkout as B, alternated A B, B A, ... (benchmarks/ab_builds.py --floor: the
# ratio as benchmarks/product_targets.py takes it). A's build, beside the tree's .venv:
#   git worktree add /tmp/abAmd 65f5bae
#   (cd /tmp/abAmd && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib TF_CPP_MIN_LOG_LEVEL=2
export TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1 # as product_targets.py runs them
R=benchmarks/results/product_targets_ab
ab() { .venv/bin/python benchmarks/ab_builds.py --a /tmp/abAmd --b . --rounds 4 --floor "$@"; }
ab --out $R/resnet50 -- --api tf --shapes resnet50 --tf-floor --seconds-per-size 6 > $R/resnet50.txt
ab --out $R/64x1M -- --api tf --tensors 64 -b 64M -e 64M --tf-floor --seconds-per-size 6 \
  > $R/64x1M.txt
