#!/usr/bin/env bash
# The backends at equal compute per step, on the 2-node test bed at 2 Gbit/s (each node's
# rank on a core of its own): Keras fit of ResNet-50 on 1 and 2 nodes on TensorFlow (.venv),
# JAX and torch (.venv-jax, .venv-torch), three rounds (benchmarks/keras_backends_scaling.py):
# keras.jsonl, one RESULT line per run, in the order run.
# The batch per backend was fixed before this run from the 1-node step times in
# ../testbed_backends/keras.jsonl (batch 16 each: TensorFlow 0.278 s, JAX 0.494 s, torch
# 0.638 s, medians): 16 x 0.638 / that backend's time, rounded, so that every backend's
# 1-node step takes about torch's: TensorFlow 37, JAX 21, torch 16.
# As root; the test bed is taken down at the end.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../../.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed
OUT=benchmarks/results/testbed_backends_equal
step() { flock -x /work/bench.lock srun --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
: > $OUT/keras.jsonl
for r in 1 2 3; do
  for run in .venv:tensorflow:37 .venv-jax:jax:21 .venv-torch:torch:16; do
    IFS=: read -r venv backend batch <<< "$run"
    for n in 1 2; do
      KERAS_BACKEND=$backend step -N $n tools/pin_to_node_core.sh $venv/bin/python -P \
        benchmarks/keras_backends_scaling.py --batch $batch | grep RESULT | tee -a $OUT/keras.jsonl
    done
  done
done
