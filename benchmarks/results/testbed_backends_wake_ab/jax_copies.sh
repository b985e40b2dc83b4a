#!/usr/bin/env bash
# JAX alone at batch 21 on 1 and 2 test-bed nodes: the code before (A, the venv A_JAX names,
# made as run.sh says) against the copies out of the core's buffer as each gradient is
# reduced, before the lanes' wake change (B: .venv-jax at that code), A B / B A / A B.
# RESULT lines prefixed by the build, in jax_copies.jsonl. As root.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../../.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed
OUT=benchmarks/results/testbed_backends_wake_ab/jax_copies.jsonl
step() { flock -x /work/bench.lock srun --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
: > $OUT
for order in "A B" "B A" "A B"; do
  for build in $order; do
    venv=$([[ $build == A ]] && echo "$A_JAX" || echo .venv-jax)
    for n in 1 2; do
      KERAS_BACKEND=jax step -N $n tools/pin_to_node_core.sh $venv/bin/python -P \
        benchmarks/keras_backends_scaling.py --batch 21 | grep RESULT | sed "s|^|$build |" | tee -a $OUT
    done
  done
done
