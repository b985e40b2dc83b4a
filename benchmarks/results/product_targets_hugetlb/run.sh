#!/bin/bash
# The op's two product-path cases without and with glibc's malloc in transparent huge
# pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, glibc >= 2.35), alternated, 2 rounds.
# Run from the repository root; writes {off,on}{1,2}/ and {off,on}{1,2}.txt here.
set -euo pipefail
out=benchmarks/results/product_targets_hugetlb
for r in 1 2; do
  for mode in off on; do
    if [ "$mode" = on ]; then export GLIBC_TUNABLES=glibc.malloc.hugetlb=1; else unset GLIBC_TUNABLES; fi
    .venv/bin/python benchmarks/product_targets.py --runs 1 --cases resnet50,64x1M \
      --out "$out/$mode$r" | grep '^|' > "$out/$mode$r.txt" || true
  done
done
