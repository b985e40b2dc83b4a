#!/bin/bash
# A short wait that reads no clock and a call's end without the team's lock: same-run A/B
# against the code before the core took every choice (b2a4d99, "O") and the code before
# this change (6c86205, "H"), alternated set by set; on the test bed also O against
# itself, the A/B's own spread. Builds of the older checkouts, beside the tree's .venv:
#   git worktree add /tmp/abOld b2a4d99; git worktree add /tmp/abHead 6c86205
#   (cd /tmp/abOld && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)   # likewise /tmp/abHead
# Their _core finds the venv's libmpi through LD_LIBRARY_PATH (its run path is relative).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib
R=benchmarks/results/ab_clock
ab() { .venv/bin/python benchmarks/ab_builds.py "$@"; }
# The 2-node test bed at 2 Gbit/s (tools/testbed.sh run 2gbit bash THIS --testbed), alone
if [ "${1:-}" = --testbed ]; then
  L="srun -N 2 --ntasks-per-node=1 --mpi=pmi2 --time=10 tools/pin_to_node_core.sh"
  for i in 1 2 3; do
    ab --a /tmp/abOld --b /tmp/abOld --rounds 4 --launch "$L" --out $R/testbed/OO_r$i -- -b 8 -e 8K -f 4 --api gradients
    ab --a /tmp/abOld --b . --rounds 4 --launch "$L" --out $R/testbed/O_new_r$i -- -b 8 -e 8K -f 4 --api gradients
    ab --a /tmp/abHead --b . --rounds 4 --launch "$L" --out $R/testbed/H_new_r$i -- -b 8 -e 8K -f 4 --api gradients
  done
  exit 0
fi
# 2 ranks on the machine, 30 rounds a set
for i in 1 2 3; do
  ab --a /tmp/abOld --b . --rounds 30 --out $R/shm/O_new_r$i -- -b 8 -e 8K -f 4 --api gradients
  ab --a /tmp/abHead --b . --rounds 30 --out $R/shm/H_new_r$i -- -b 8 -e 8K -f 4 --api gradients
done
for i in 1 2; do
  ab --a /tmp/abOld --b . --rounds 30 --out $R/shm/average_O_new_r$i -- -b 8 -e 8K -f 4 --api average
done
