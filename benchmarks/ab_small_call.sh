#!/bin/bash
# Same-run A/B sets of a one-array call at 8 B-8 KiB (benchmarks/ab_builds.py, -b 8 -e 8K -f 4),
# for the results folders that compare checkouts set by set:
#
#   bash benchmarks/ab_small_call.sh OUT SETS NAME=A,B ...            # 2 ranks, 30 rounds a set
#   bash benchmarks/ab_small_call.sh --testbed OUT SETS NAME=A,B ...  # 2 test-bed nodes, 4 rounds
#
# For set i = 1..SETS, each NAME in turn: A against B into OUT/NAME_ri. A and B are checkout
# paths (.: this one); API=average (default gradients) picks the call. Older checkouts' _core
# find the venv's libmpi through LD_LIBRARY_PATH (their run path is relative).
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.venv/lib
launch=() rounds=30
if [ "$1" = --testbed ]; then
  launch=(--launch "srun -N 2 --ntasks-per-node=1 --mpi=pmi2 --time=10 tools/pin_to_node_core.sh")
  rounds=4
  shift
fi
out=$1 sets=$2
shift 2
for i in $(seq 1 "$sets"); do
  for pair in "$@"; do
    name=${pair%%=*} builds=${pair#*=}
    .venv/bin/python benchmarks/ab_builds.py --a "${builds%,*}" --b "${builds#*,}" --rounds $rounds \
      "${launch[@]}" --out "$out/${name}_r$i" -- -b 8 -e 8K -f 4 --api "${API:-gradients}"
  done
done
