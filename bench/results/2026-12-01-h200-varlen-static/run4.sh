#!/usr/bin/env bash
# Issue 20, call 4: the varlen suite after the slots path before Hopper (its gather tests run on the CPU
# with torch: test_slots_path_*), and the FA interface / KV-cache suites again on this tree.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 400 python3 -m pytest -q tests/python/test_varlen.py tests/python/test_flash_attn_interface.py tests/python/test_kvcache.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60; }
