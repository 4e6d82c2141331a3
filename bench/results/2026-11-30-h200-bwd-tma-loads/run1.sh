#!/usr/bin/env bash
# First call: the query-tile ring by TMA + mbarriers (make_tma.py) against the translation as emitted
# (main at 3edaaf9), kernel to kernel in one process. out/tma/par_*.cu: `qattn plan --backward ... --print`
# translated by qattn_translate (the configs below); out/tma/tma_*.cu: the same through make_tma.py.
# Numerics of every tma_* library (bwd_check's fixed shapes + random ones), then TFLOPS of both.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/tmalib; ARGS=()
for f in out/tma/par_*.cu out/tma/tma_*.cu; do n=$(basename "$f" .cu); ARGS+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 16 "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"
grep -E "registers|fail|exit" "$OUT/build.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/tma_*.so --random 4 > "$OUT/numerics.txt" 2>&1
echo "numerics exit $?" >> "$OUT/numerics.txt"; grep -E "numerics|FAIL|exit" "$OUT/numerics.txt" | tail -12
timeout 330 python3 tests/gpu/bwd_check.py $L/{par,tma}_d128_causal.so $L/{par,tma}_d128_none.so $L/{par,tma}_d64_causal.so \
  $L/{par,tma}_d64_none_mha.so $L/{par,tma}_d256_causal.so $L/{par,tma}_d128_doc.so $L/{par,tma}_d128_window_mha.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt"
