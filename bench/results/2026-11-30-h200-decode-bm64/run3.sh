#!/usr/bin/env bash
# Third call: the row-wise runtime's changes (device/qattn/rowwise.cuh: RowAddr, a warp's index modulo
# WARPS) under the kernels that use it besides the combine: the backward's Phases (D = rowsum(dO * O)
# before the main kernel) in the backward suite's autograd checks, and the combine's own check.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 280 python3 -m pytest -q -x tests/python/test_gpu_training.py -k "matches_autograd or deterministic" \
  tests/python/test_combine.py > $OUT/pytest_rowwise.txt 2>&1
rc=$?; tail -3 $OUT/pytest_rowwise.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"
[ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest_rowwise.txt | head -60
