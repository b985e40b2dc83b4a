#!/bin/bash
# The one-array calls' glue reading the list, the team's binding and the thread's identity
# in C: same-run A/B against the code before the core took every choice (b2a4d99), of the
# code before this change (dc1d0f5, "before") and after it ("after"), alternated set by set.
# Builds of the older checkouts, beside the working tree's .venv:
#   git worktree add /tmp/abOld b2a4d99; git worktree add /tmp/abA dc1d0f5
#   (cd /tmp/abOld && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)   # likewise /tmp/abA
# Their _core finds the venv's libmpi through LD_LIBRARY_PATH (its run path is relative).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib
R=benchmarks/results/ab_glue
ab() { .venv/bin/python benchmarks/ab_builds.py --a /tmp/abOld "$@"; }
# The 2-node test bed at 2 Gbit/s (tools/testbed.sh run 2gbit bash THIS --testbed), alone
if [ "${1:-}" = --testbed ]; then
  L="srun -N 2 --ntasks-per-node=1 --mpi=pmi2 --time=10 tools/pin_to_node_core.sh"
  for i in 1 2 3; do
    ab --b /tmp/abA --rounds 4 --launch "$L" --out $R/testbed/gradients_before_r$i -- -b 8 -e 8K -f 4 --api gradients
    ab --b . --rounds 4 --launch "$L" --out $R/testbed/gradients_after_r$i -- -b 8 -e 8K -f 4 --api gradients
  done
  exit 0
fi
# 2 ranks on the machine (8 rounds a set), gradients 3 sets, average 2
for i in 1 2 3; do
  ab --b /tmp/abA --rounds 8 --out $R/shm/gradients_before_r$i -- -b 8 -e 8K -f 4 --api gradients
  ab --b . --rounds 8 --out $R/shm/gradients_after_r$i -- -b 8 -e 8K -f 4 --api gradients
done
for i in 1 2; do
  ab --b /tmp/abA --rounds 8 --out $R/shm/average_before_r$i -- -b 8 -e 8K -f 4 --api average
  ab --b . --rounds 8 --out $R/shm/average_after_r$i -- -b 8 -e 8K -f 4 --api average
done
