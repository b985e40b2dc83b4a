#!/usr/bin/env bash
# The backends at nearer compute per step. The batches were fixed before the run from the
# 1-node step times in ../testbed_backends/keras.jsonl (batch 16 each: TensorFlow 0.278 s,
# JAX 0.494 s, torch 0.638 s, medians): 16 x 0.638 / that backend's time, rounded, so that
# each 1-node step would take about torch's: TensorFlow 37, JAX 21, torch 16.
exec "$(dirname "$0")/../../testbed_backends_batches.sh" benchmarks/results/testbed_backends_equal 37 21 16
