#!/bin/sh
# The digits model's accuracy with float32, bfloat16 and float16 values on ml_comm's wire,
# 2 ranks, every reduction on the ring. Writes beside this script; run from the repository root.
set -e
R=benchmarks/results/wire16
for c in none bf16 fp16; do
  ML_COMM_LATENCY_BYTES=0 ML_COMM_DIRECT_BYTES=0 .venv/bin/mpiexec -n 2 .venv/bin/python \
    examples/tf2_digits.py --compression $c > $R/digits_$c.txt
done
