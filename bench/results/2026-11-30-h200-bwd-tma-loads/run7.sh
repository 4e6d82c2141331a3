#!/usr/bin/env bash
# Seventh call: make_pro.py (the first ring slot issued while K and V still load) against the lowering
# as committed (new_), kernel to kernel in one process; numerics of pro_ on the fixed shapes.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/tmalib; ARGS=()
for n in d128_causal d128_none d64_causal; do for v in new pro; do ARGS+=(--cu "${v}_$n=out/tma/${v}_$n.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 6 "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"
grep -E "fail|exit" "$OUT/build.txt"
timeout 60 python3 tests/gpu/bwd_check.py $L/pro_*.so > "$OUT/numerics.txt" 2>&1
echo "numerics exit $?" >> "$OUT/numerics.txt"; grep -E "^numerics|exit" "$OUT/numerics.txt"
timeout 120 python3 tests/gpu/bwd_check.py $L/{new,pro}_d128_causal.so $L/{new,pro}_d128_none.so $L/{new,pro}_d64_causal.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,1024,1024;8,32,8,2048,2048;1,32,8,16384,16384' --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt"
