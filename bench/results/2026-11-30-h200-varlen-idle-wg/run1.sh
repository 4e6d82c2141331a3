#!/usr/bin/env bash
# Call 1: the ragged kernel whose second consumer warpgroup, when its 64 rows all lie past the
# sequence's (a decoding sequence's G packed rows), runs only the rings' waits / releases and the
# pingpong turns. Numerics (the varlen, FlashAttention-interface and KV-cache suites), then speed:
# bench/bench_varlen.py's serving steps and prefill rows in one process, `--also parent` = main at
# 868152d (the same tree without the shadow). Carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 300 python3 -m pytest -q tests/python/test_varlen.py tests/python/test_flash_attn_interface.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
timeout 260 python3 bench/bench_varlen.py $OUT/results.csv --rounds 5 \
  --rows serve_gqa_64x4k+512,serve_gqa_128x2k+2k,serve_gqa64_32x8k+1k,serve_mqa_32x8k+1k,serve_mqa_4x32k+256,eq_8x2k,mix_uniform_128 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -12 $OUT/bench.txt
