#!/usr/bin/env bash
# Call 1: numerics of the key split over ragged queries and a KV cache (a serving step of few long
# sequences): the varlen suite (its new split test: MQA 16/1 pages of 64, GQA 32/8 pages of 16, MHA
# contiguous; each sequence against fp64 and the call unsplit), the split-keys and combine suites, and
# `qattn generate` of the split ragged kernel through its GPU step. Carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 400 python3 -m pytest -q tests/python/test_varlen.py tests/python/test_split_keys.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
timeout 150 $QATTN_BIN generate --preset llama3-8b --varlen true --kv-cache paged --split-keys true --gpu h200 --out /tmp/gen \
  > $OUT/generate.txt 2>&1; echo "generate rc=$?" | tee -a $OUT/generate.txt
grep -E "PASS|FAIL|split" $OUT/generate.txt | tail -8; echo "total $(( $(date +%s) - S )) s"
