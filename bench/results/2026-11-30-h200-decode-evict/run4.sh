#!/usr/bin/env bash
# Call 6: the final form (the hint behind TL `{stream}`, which the planner writes on decoding and
# KV-cache kernels only): numerics of the decoding paths. Carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 400 python3 -m pytest -q tests/python/test_kvcache.py tests/python/test_split_keys.py tests/python/test_mla_decode.py \
  > $OUT/pytest_final.txt 2>&1
rc=$?; tail -3 $OUT/pytest_final.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest_final.txt | head -60
# Calls 7 and 8 (carry out/parent too): decode_final.txt (before the hint was limited to GQA-packed
# kernels, pages 0 only) and decode_final2.txt (the final form):
source tests/gpu/device_env.sh
timeout 300 python3 bench/bench_kvcache.py $OUT/results_final2.csv --rounds 9 --pages 0,64 \
  --rows mqa_32_1_b32_8k,mqa_16_1_b8_16k,gqa_32_8_b32_8k,mha_32_32_b8_4k \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn 2>&1 | tee $OUT/decode_final2.txt | tail -10
