#!/usr/bin/env bash
# Run a command pinned to one core picked by its Slurm node: node index i (SLURM_NODEID,
# 0-based) gets core i mod (cores this task may use). The test bed's slurm.conf has
# TaskPlugin=task/none (its nodes share one machine's cores), so srun --cpu-bind does
# nothing there; this does the binding instead. With more nodes than cores, nodes share a
# core (4 nodes on 2 cores: nodes 0 and 2 on the first, 1 and 3 on the second).
#
#   srun -N 4 --ntasks-per-node=1 --mpi=pmi2 tools/pin_to_node_core.sh python bench.py
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
node=${SLURM_NODEID:?not inside a Slurm step (SLURM_NODEID unset)}
# the cores this task may use, in order (taskset prints e.g. "0,1" or "0-3")
mapfile -t cores < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
core=${cores[node % ${#cores[@]}]}
exec taskset -c "$core" "$@"
