#!/usr/bin/env bash
# The backends at equal compute per step, second try. In ../testbed_backends_equal the
# 1-node steps took JAX 0.594 s and torch 0.595 s at batches 21 and 16 but TensorFlow 0.453 s
# at 37 (medians): TensorFlow's step does not grow in proportion to its batch. Its batch
# here, fixed before the run, is where the line through its two measured points (16: 0.278 s
# in ../testbed_backends, 37: 0.453 s) reaches 0.595 s: 16 + 21 x 0.317 / 0.175 = 54.
exec "$(dirname "$0")/../../testbed_backends_batches.sh" benchmarks/results/testbed_backends_equal_time 54 21 16
