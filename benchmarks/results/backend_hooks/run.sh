#!/usr/bin/env bash
# The Keras hook's reduction on JAX and on torch against mc.gradients on NumPy arrays,
# ResNet-50's gradient list at 2 ranks (benchmarks/backend_hooks.py), each in its own
# venv (tools/dev.py keras-backends makes them), alone on the machine: three rounds, the
# frameworks alternated; round 1 writes {jax,torch}.{json,txt}, rounds 2-3 *_r{2,3}.*.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/backend_hooks
for round in 1 2 3; do
  suffix=$([ "$round" = 1 ] && echo "" || echo "_r$round")
  for fw in jax torch; do
    KERAS_BACKEND=$fw flock -x /work/bench.lock timeout 900 .venv-$fw/bin/mpiexec -n 2 \
      .venv-$fw/bin/python -P benchmarks/backend_hooks.py --framework $fw --reps 30 \
      --json $out/$fw$suffix.json | tee $out/$fw$suffix.txt
  done
done
