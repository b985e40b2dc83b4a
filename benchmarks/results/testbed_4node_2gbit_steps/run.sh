#!/bin/bash
# 4 nodes, 1-4 MiB: what moves ml_comm's ratio? chunk size, pinning (interleaved repeats)
set -u
cd "$(dirname "$0")/../../.."; R=benchmarks/results/testbed_4node_2gbit_steps; mkdir -p $R
eval "$(tools/testbed.sh env)"
B="-b 1M -e 4M -t 1 --seconds-per-size 2"
for r in 1 2 3; do
  for v in default c256K c4M unpinned; do
    case $v in
      default) pre=tools/pin_to_node_core.sh; extra="";;
      c256K) pre=tools/pin_to_node_core.sh; extra="--chunk-bytes 256K";;
      c4M) pre=tools/pin_to_node_core.sh; extra="--chunk-bytes 4M";;
      unpinned) pre=""; extra="";;
    esac
    srun -N 4 --ntasks-per-node=1 --mpi=pmi2 --time=10 $pre .venv/bin/python benchmarks/allreduce.py $B $extra --json $R/${v}_r$r.json > $R/${v}_r$r.txt
    echo "$v r$r rc $? $(date +%T)"
  done
done
echo done
