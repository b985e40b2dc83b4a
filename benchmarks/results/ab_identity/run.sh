#!/bin/bash
# The thread's identity read from its Python thread state's dict: same-run A/B against the
# code before the core took every choice (b2a4d99, "O") and the code before this change
# (f9f957f, "P"), alternated set by set; on the test bed also O against itself, the A/B's
# own spread; and the 8-byte call's layers per checkout. Builds of the older checkouts,
# beside the tree's .venv:
#   git worktree add /tmp/abOld b2a4d99; git worktree add /tmp/abPrev f9f957f
#   (cd /tmp/abOld && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)   # likewise /tmp/abPrev
# Their _core finds the venv's libmpi through LD_LIBRARY_PATH (its run path is relative).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib
R=benchmarks/results/ab_identity
ab() { .venv/bin/python benchmarks/ab_builds.py "$@"; }
# The 2-node test bed at 2 Gbit/s (tools/testbed.sh run 2gbit bash THIS --testbed), alone
if [ "${1:-}" = --testbed ]; then
  L="srun -N 2 --ntasks-per-node=1 --mpi=pmi2 --time=10 tools/pin_to_node_core.sh"
  for i in 1 2 3; do
    ab --a /tmp/abOld --b /tmp/abOld --rounds 4 --launch "$L" --out $R/testbed/OO_r$i -- -b 8 -e 8K -f 4 --api gradients
    ab --a /tmp/abOld --b . --rounds 4 --launch "$L" --out $R/testbed/O_new_r$i -- -b 8 -e 8K -f 4 --api gradients
  done
  exit 0
fi
# 2 ranks on the machine, 30 rounds a set
for i in 1 2 3; do
  ab --a /tmp/abOld --b . --rounds 30 --out $R/shm/O_new_r$i -- -b 8 -e 8K -f 4 --api gradients
  ab --a /tmp/abPrev --b . --rounds 30 --out $R/shm/P_new_r$i -- -b 8 -e 8K -f 4 --api gradients
done
# Per call at 8 B through each layer (cost_split.py layers), O P N N P O O P N
for c in O P N N P O O P N; do
  case $c in O) pp=/tmp/abOld ;; P) pp=/tmp/abPrev ;; N) pp=$PWD ;; esac
  echo "$c;$(PYTHONPATH=$pp .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py layers \
    -n 100000 | tail -4 | sed -E 's/  +/ /g' | paste -sd ';')"
done > $R/layers.txt
