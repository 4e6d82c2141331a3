#!/usr/bin/env bash
# Issue 20: decoding's packed rows (seqlen_q x group <= 64) on one 64-row tile with one consumer
# warpgroup (plan::decode_tile; Python's "decode" kernels, _build.short_queries). The KV-cache, split,
# varlen and FA-interface suites with this tree, then the decode table against the parent (out/parent:
# this tree's device/ with the qattn built before the planner rule: BM 128) in the same process.
# On the device machine from the repository root; carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 330 python3 -m pytest -q -x tests/python/test_kvcache.py tests/python/test_split_keys.py tests/python/test_varlen.py \
  tests/python/test_flash_attn_interface.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -80; exit 1; }
timeout 200 python3 bench/bench_kvcache.py $OUT/results.csv --rounds 9 --pages 0,16,64 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/decode.txt 2>&1
rc=$?; echo "sweep rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode.txt
grep -h "^gqa\|^mqa\|^mha\|speed vs" $OUT/decode.txt | head -60
