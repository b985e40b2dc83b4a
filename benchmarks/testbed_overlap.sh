#!/usr/bin/env bash
# Keras fit of ResNet-50 on one backend (jax or torch), on the 2-node test bed at
# 2 Gbit/s (each node's rank on a core of its own): gradients handed over during backprop
# (--overlap-backprop on, the default) against averaged in apply after backprop (off),
# alternated, three rounds, and the 1-node run that both are compared with
# (benchmarks/keras_backends_scaling.py). OUT/keras.jsonl: one RESULT line per run, in the
# order run. As root; the test bed is taken down at the end.
#     benchmarks/testbed_overlap.sh BACKEND OUT
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed "$@"
BACKEND=$2 OUT=$3
step() { flock -x /work/bench.lock .venv/bin/python tests/testbed/slurm_step.py 900 \
  --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
run() { KERAS_BACKEND=$BACKEND step -N $1 tools/pin_to_node_core.sh .venv-$BACKEND/bin/python -P \
  benchmarks/keras_backends_scaling.py --overlap-backprop $2 | grep RESULT | tee -a $OUT/keras.jsonl; }
: > $OUT/keras.jsonl
for r in 1 2 3; do
  run 1 on
  if [ $((r % 2)) = 1 ]; then run 2 on; run 2 off; else run 2 off; run 2 on; fi
done
