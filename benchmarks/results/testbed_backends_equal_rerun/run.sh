#!/usr/bin/env bash
# ../testbed_backends_equal_time again (the same batches, 54, 21 and 16, and script), on the
# code that wakes the lanes only when a group's ready prefix reaches what they wait for and
# copies JAX's averages out as each tensor is reduced.
exec "$(dirname "$0")/../../testbed_backends_batches.sh" benchmarks/results/testbed_backends_equal_rerun 54 21 16
