#!/usr/bin/env bash
# Second call: MLA 192/128 with 128-key tiles on wgmma (x_*: the planner's TL with BN = 128; dK, dV
# split along M, 64 key rows a warpgroup; only K in 64-byte-swizzled atoms) against the 64-key wgmma
# form (w_*) and the mma.sync form (m_*), same process: numerics, then TFLOPS.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-mla-wgmma
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$PWD/out/gpu-py/lib PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
bash $D/scripts/build2.sh > "$OUT/build2.txt" 2>&1; cat "$OUT/build2.txt"
L=out/mlaw2
timeout 120 python3 tests/gpu/bwd_check.py $L/x_*.so --random 10 > "$OUT/bwd_check2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check2.txt"
grep -E "numerics|FAIL|exit" "$OUT/bwd_check2.txt" | tail -8
timeout 200 python3 tests/gpu/bwd_check.py $L/[mwx]_mla_causal.so $L/[mwx]_mla_none.so --bench \
  --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' \
  --csv "$OUT/kernels2.csv" > "$OUT/bench2.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2.txt"
grep -E "TFLOPS|exit" "$OUT/bench2.txt"
