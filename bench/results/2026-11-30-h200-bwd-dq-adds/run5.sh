#!/usr/bin/env bash
# Fifth call: the query tile's inputs three slots deep (s3, s3v4: variants4.py) and dQ's float4
# reductions through shuffles (sh4: variants5.py) against base and v4: numerics, then TFLOPS in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/dqb/lib; ARGS=()
for v in base v4 s3 s3v4 sh4; do for m in causal none; do ARGS+=(--cu "${v}_$m=out/dqb/${v}_$m.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build5.txt" 2>&1; echo "build exit $?" >> "$OUT/build5.txt"; cat "$OUT/build5.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/{s3,s3v4,sh4}_{causal,none}.so --random 4 > "$OUT/bwd_check5.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check5.txt"; grep -E "numerics|FAIL|exit" "$OUT/bwd_check5.txt" | tail -8
timeout 300 python3 tests/gpu/bwd_check.py $L/{base,v4,s3,s3v4,sh4}_causal.so $L/{base,v4,s3,s3v4,sh4}_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels5.csv" > "$OUT/bench5.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench5.txt"; grep -E "TFLOPS|exit" "$OUT/bench5.txt"
