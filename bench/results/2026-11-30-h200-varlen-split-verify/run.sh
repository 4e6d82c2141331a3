#!/usr/bin/env bash
# The GPU check of `qattn generate` (qattn._varlen_check) on the ragged kernel that splits the keys over
# a paged cache: 1, 3 and 7 parts merged in fp64; the new test (and its planted one-part launch) and
# `qattn generate` of that kernel through its GPU step. Carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 300 python3 -m pytest -q tests/python/test_varlen.py -k "check_merges or splits_the_keys or serving_step" > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
timeout 250 $QATTN_BIN generate --preset llama3-8b --varlen true --kv-cache paged --split-keys true --mask causal --gpu h200 \
  --out /tmp/gen > $OUT/generate.txt 2>&1; echo "generate rc=$?"
grep -E "parts|varlen|PASS|FAIL|verif" $OUT/generate.txt | head -20; echo "total $(( $(date +%s) - S )) s"
