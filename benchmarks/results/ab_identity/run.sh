#!/bin/bash
# The thread's identity read from its Python thread state's dict: same-run A/B against the
# code before the core took every choice (b2a4d99, "O") and the code before this change
# (f9f957f, "P"), alternated set by set; on the test bed also O against itself, the A/B's
# own spread (tools/testbed.sh run 2gbit bash THIS --testbed); and the 8-byte call's layers
# per checkout. Builds of the older checkouts, beside the tree's .venv:
#   git worktree add /tmp/abOld b2a4d99; git worktree add /tmp/abPrev f9f957f
#   (cd /tmp/abOld && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)   # likewise /tmp/abPrev
set -euo pipefail
AB="bash $(dirname "$0")/../../ab_small_call.sh"
R=benchmarks/results/ab_identity
if [ "${1:-}" = --testbed ]; then
  exec $AB --testbed $R/testbed 3 OO=/tmp/abOld,/tmp/abOld O_new=/tmp/abOld,.
fi
$AB $R/shm 3 O_new=/tmp/abOld,. P_new=/tmp/abPrev,.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.venv/lib
# Per call at 8 B through each layer (cost_split.py layers), O P N N P O O P N
for c in O P N N P O O P N; do
  case $c in O) pp=/tmp/abOld ;; P) pp=/tmp/abPrev ;; N) pp=$PWD ;; esac
  echo "$c;$(PYTHONPATH=$pp .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py layers \
    -n 100000 | tail -4 | sed -E 's/  +/ /g' | paste -sd ';')"
done > $R/layers.txt
