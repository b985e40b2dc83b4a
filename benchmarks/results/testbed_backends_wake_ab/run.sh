#!/usr/bin/env bash
# The three backends at equal compute per step (batches 54, 21, 16, as in
# ../testbed_backends_equal_time), the code before (A) and after (B) two changes to the
# keyed groups: lanes woken only when the ready prefix reaches what they wait for, and
# JAX's averages copied out of the core's buffer as each tensor is reduced. A's venvs
# are copies of .venv, .venv-jax and .venv-torch with the earlier commit installed:
#     cp -a .venv A/venv-tf && A/venv-tf/bin/python -m pip install --no-deps \
#         --no-build-isolation --force-reinstall <checkout of the earlier commit>
# (the same for jax and torch), named by A_TF, A_JAX, A_TORCH. Per backend and round
# the builds alternate A B, B A, A B; each runs 1 node then 2. RESULT lines prefixed by
# the build, in OUT/keras.jsonl. As root; the test bed is taken down at the end.
#     bash benchmarks/results/testbed_backends_wake_ab/run.sh
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../../.."
[[ ${1:-} == --on-testbed ]] || exec tools/testbed.sh run 2gbit "$self" --on-testbed
OUT=benchmarks/results/testbed_backends_wake_ab
step() { flock -x /work/bench.lock srun --ntasks-per-node=1 --mpi=pmi2 --time=20 "$@"; }
: > $OUT/keras.jsonl
for order in "A B" "B A" "A B"; do
  for run in tensorflow:54:.venv:$A_TF jax:21:.venv-jax:$A_JAX torch:16:.venv-torch:$A_TORCH; do
    IFS=: read -r backend batch venv_b venv_a <<< "$run"
    for build in $order; do
      venv=$([[ $build == A ]] && echo "$venv_a" || echo "$venv_b")
      for n in 1 2; do
        KERAS_BACKEND=$backend step -N $n tools/pin_to_node_core.sh $venv/bin/python -P \
          benchmarks/keras_backends_scaling.py --batch $batch | grep RESULT | sed "s|^|$build |" \
          | tee -a $OUT/keras.jsonl
      done
    done
  done
done
