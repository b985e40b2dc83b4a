#!/usr/bin/env bash
# The 2-node test bed at 2 Gbit/s, each node's rank on a core of its own:
#  1. a DDP step with ResNet-50's gradients, ml_comm's hook against gloo, alternating in
#     each run (benchmarks/ddp_step.py), three runs: ddp_r{1,2,3}.txt
#  2. Keras fit of ResNet-50 on 1 and 2 nodes on TensorFlow (.venv), JAX and torch
#     (.venv-jax, .venv-torch: tools/dev.py keras-backends makes them)
#     (benchmarks/keras_backends_scaling.py), three rounds: keras.jsonl, one RESULT line
#     per run, in the order run.
# At the end, tools/testbed.sh status (the veths' byte counters): testbed_status.txt.
# As root; the test bed is taken down at the end.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../../.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed
OUT=benchmarks/results/testbed_backends
step() { flock -x /work/bench.lock srun --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
for r in 1 2 3; do
  GLOO_SOCKET_IFNAME=eth0 step -N 2 tools/pin_to_node_core.sh .venv-torch/bin/python -P \
    benchmarks/ddp_step.py --steps 20 --json $OUT/ddp_r$r.json | tee $OUT/ddp_r$r.txt
done
: > $OUT/keras.jsonl
for r in 1 2 3; do
  for venv in .venv:tensorflow .venv-jax:jax .venv-torch:torch; do
    for n in 1 2; do
      KERAS_BACKEND=${venv#*:} step -N $n tools/pin_to_node_core.sh ${venv%%:*}/bin/python -P \
        benchmarks/keras_backends_scaling.py | grep RESULT | tee -a $OUT/keras.jsonl
    done
  done
done
tools/testbed.sh status > $OUT/testbed_status.txt 2>&1 || true
