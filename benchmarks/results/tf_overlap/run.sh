#!/usr/bin/env bash
# benchmarks/tf_overlap.py on the 2-node test bed at 2 Gbit/s, one core per node: one,
# two and the default number of TensorFlow inter-op threads, alternated, two rounds:
# interop{1,2,0}_r{1,2}.{txt,json}. As root; the test bed is left as it was found up.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/tf_overlap
tools/testbed.sh status >/dev/null 2>&1 || tools/testbed.sh up
eval "$(tools/testbed.sh env)"
tools/testbed.sh shape 2gbit
for r in 1 2; do
  for n in 1 2 0; do
    .venv/bin/python tests/testbed/slurm_step.py 600 -N 2 --ntasks-per-node=1 --mpi=pmi2 \
      --time=10 tools/pin_to_node_core.sh .venv/bin/python -P benchmarks/tf_overlap.py \
      --inter-op $n --json $out/interop${n}_r$r.json | tee $out/interop${n}_r$r.txt
  done
done
