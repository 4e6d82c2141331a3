#!/usr/bin/env bash
# LSE and D read by column from shared memory where they are used (ew_cols_smem) instead of held in
# registers: the planner's d64 / d128 transposed backward (base_*: as translated; lazy_*: the same
# CUDA with both column vectors read lazily), numerics and TFLOPS in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-lazy-cols
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$PWD/out/gpu-py/lib PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
bash $D/scripts/build.sh > "$OUT/build.txt" 2>&1; cat "$OUT/build.txt"
L=out/lazy
timeout 120 python3 tests/gpu/bwd_check.py $L/*.so --random 6 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|exit" "$OUT/bwd_check.txt" | tail -8
timeout 200 python3 tests/gpu/bwd_check.py $L/base_b64_causal.so $L/lazy_b64_causal.so $L/base_b64_none.so $L/lazy_b64_none.so \
  $L/base_b128_causal.so $L/lazy_b128_causal.so $L/base_b128_none.so $L/lazy_b128_none.so --bench --shapes '1,4,4,300,300' \
  --bench-shapes '4,32,32,4096,4096;2,32,32,8192,8192;1,32,32,16384,16384' --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt"
