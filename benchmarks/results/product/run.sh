#!/bin/sh
# The product path against MPI_Allreduce at 2 ranks on one machine (shared memory).
# Writes NAME.txt and NAME.json beside this script; run from the repository root.
set -e
R=benchmarks/results/product
B="benchmarks/allreduce.py --seconds-per-size 3"
M=".venv/bin/mpiexec -n 2 .venv/bin/python"
# NumPy mc.gradients, one array, every power of two from 8 B to 256 MiB
$M $B --api gradients --seconds-per-size 1 --json $R/gradients.json --plot $R/gradients.png > $R/gradients.txt
# the same against an MPI_Allreduce whose temporary buffer stays mapped (glibc never maps, never trims)
MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4000000000 \
  $M $B --api gradients -b 1M -e 256M -f 4 --json $R/gradients_mpi_nofault.json > $R/gradients_mpi_nofault.txt
# lists: 64 tensors of 1 MiB, ResNet-50's 214 gradients
$M $B --api gradients --tensors 64 -b 64M -e 64M --json $R/gradients_64x1M.json > $R/gradients_64x1M.txt
$M $B --api gradients --shapes resnet50 --json $R/gradients_resnet50.json > $R/gradients_resnet50.txt
# the TensorFlow op in tf.function, one thread per TensorFlow pool (docs/launch.md, ranks sharing cores)
export TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1
$M $B --api tf --tf-floor -b 1M -e 64M -f 64 --json $R/tf.json > $R/tf.txt
$M $B --api tf --tf-floor --tensors 64 -b 64M -e 64M --json $R/tf_64x1M.json > $R/tf_64x1M.txt
$M $B --api tf --tf-floor --shapes resnet50 --json $R/tf_resnet50.json > $R/tf_resnet50.txt
