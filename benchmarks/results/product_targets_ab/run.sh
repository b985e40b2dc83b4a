#!/bin/bash
# The TensorFlow op's product targets, code against code, alternated A B, B A, ...
# (benchmarks/ab_builds.py --floor: the ratio as benchmarks/product_targets.py takes it).
#   run.sh [A_CHECKOUT [OUT_FOLDER [tfmem]]]
# Defaults: the AMD EPYC host's run, 65f5bae (the code of the earlier AMD run,
# product_path.md "The three targets on the earlier host") as A, this checkout as B, into
# this folder; `tfmem` adds the two cases with MPI in TensorFlow's memory
# (product_targets_ab_intel/run.sh). A's build, beside the tree's .venv:
#   git worktree add /tmp/abAmd 65f5bae
#   (cd /tmp/abAmd && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)
set -euo pipefail
cd "$(dirname "$0")/../../.."
A=${1:-/tmp/abAmd}
R=${2:-benchmarks/results/product_targets_ab}
export LD_LIBRARY_PATH=$PWD/.venv/lib TF_CPP_MIN_LOG_LEVEL=2
export TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1 # as product_targets.py runs them
ab() { .venv/bin/python benchmarks/ab_builds.py --a "$A" --b . --rounds 4 --floor "$@"; }
for memory in numpy ${3:+tensorflow}; do
  suffix=$([ "$memory" = tensorflow ] && echo -tfmem || true)
  ab --out $R/resnet50$suffix -- --api tf --shapes resnet50 --tf-floor --mpi-memory $memory \
    --seconds-per-size 6 > $R/resnet50$suffix.txt
  ab --out $R/64x1M$suffix -- --api tf --tensors 64 -b 64M -e 64M --tf-floor \
    --mpi-memory $memory --seconds-per-size 6 > $R/64x1M$suffix.txt
done
