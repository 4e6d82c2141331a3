#!/usr/bin/env bash
# Second call: the rows where run1 measured the early ring slot slower (documents 0.986-0.998x, d128
# without a mask at 4k / 8k 0.989 / 0.997x) again, 21 rounds, in both library orders.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/prolib; ARGS=()
for n in d128_doc d128_none; do for v in par new; do ARGS+=(--cu "${v}_$n=out/pro/${v}_$n.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"
S='8,32,8,2048,2048;4,32,8,4096,4096;2,32,8,8192,8192;8,32,32,2048,2048'
for n in d128_doc d128_none; do
  timeout 80 python3 bench/bench_bwd_ab.py $L/par_$n.so $L/new_$n.so --shapes "$S" --rounds 21 >> "$OUT/ab2.txt" 2>&1
  timeout 80 python3 bench/bench_bwd_ab.py $L/new_$n.so $L/par_$n.so --shapes "$S" --rounds 21 >> "$OUT/ab2.txt" 2>&1
done
grep -v "^NVIDIA" "$OUT/ab2.txt"
