#!/usr/bin/env bash
# Keras fit of ResNet-50 on 1 and 2 nodes of the test bed at 2 Gbit/s (each node's rank on
# a core of its own) on TensorFlow (.venv), JAX and torch (.venv-jax, .venv-torch), each at
# the batch given, three rounds (benchmarks/keras_backends_scaling.py): OUT/keras.jsonl, one
# RESULT line per run, in the order run. As root; the test bed is taken down at the end.
#     benchmarks/testbed_backends_batches.sh OUT TF_BATCH JAX_BATCH TORCH_BATCH
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed "$@"
OUT=$2
step() { flock -x /work/bench.lock srun --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
: > $OUT/keras.jsonl
for r in 1 2 3; do
  for run in .venv:tensorflow:$3 .venv-jax:jax:$4 .venv-torch:torch:$5; do
    IFS=: read -r venv backend batch <<< "$run"
    for n in 1 2; do
      KERAS_BACKEND=$backend step -N $n tools/pin_to_node_core.sh $venv/bin/python -P \
        benchmarks/keras_backends_scaling.py --batch $batch | grep RESULT | tee -a $OUT/keras.jsonl
    done
  done
done
