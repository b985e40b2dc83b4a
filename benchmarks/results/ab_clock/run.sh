#!/bin/bash
# A short wait that reads no clock and a call's end without the team's lock: same-run A/B
# against the code before the core took every choice (b2a4d99, "O") and the code before this
# change (6c86205, "H"), alternated set by set; on the test bed also O against itself, the
# A/B's own spread (tools/testbed.sh run 2gbit bash THIS --testbed). Builds of the older
# checkouts, beside the tree's .venv:
#   git worktree add /tmp/abOld b2a4d99; git worktree add /tmp/abHead 6c86205
#   (cd /tmp/abOld && ML_COMM_MPICC=/work/main/.venv/bin/mpicc \
#       /work/main/.venv/bin/python setup.py -q build_ext --inplace)   # likewise /tmp/abHead
set -euo pipefail
AB="bash $(dirname "$0")/../../ab_small_call.sh"
R=benchmarks/results/ab_clock
if [ "${1:-}" = --testbed ]; then
  exec $AB --testbed $R/testbed 3 OO=/tmp/abOld,/tmp/abOld O_new=/tmp/abOld,. H_new=/tmp/abHead,.
fi
$AB $R/shm 3 O_new=/tmp/abOld,. H_new=/tmp/abHead,.
API=average $AB $R/shm 2 average_O_new=/tmp/abOld,.
