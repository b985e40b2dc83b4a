#!/usr/bin/env bash
# Keras fit of ResNet-50 on jax, on the 2-node test bed: the average during backprop on
# and off, alternated (benchmarks/testbed_overlap.sh). keras.jsonl: the runs, in order.
exec "$(dirname "$0")/../../testbed_overlap.sh" jax benchmarks/results/jax_overlap
