#!/usr/bin/env bash
# The Keras hook's reduction on JAX and on torch against mc.gradients on NumPy arrays,
# ResNet-50's gradient list at 2 ranks (benchmarks/backend_hooks.py), each in its own
# venv (tools/dev.py keras-backends makes them), alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/backend_hooks
for fw in jax torch; do
  KERAS_BACKEND=$fw flock -x /work/bench.lock timeout 900 .venv-$fw/bin/mpiexec -n 2 \
    .venv-$fw/bin/python -P benchmarks/backend_hooks.py --framework $fw --reps 30 \
    --json $out/$fw.json 2>/dev/null | tee $out/$fw.txt
done
