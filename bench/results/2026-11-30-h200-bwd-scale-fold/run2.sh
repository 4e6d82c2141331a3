#!/usr/bin/env bash
# Second call: the scale folded into dS with the masks kept on S (fold_*: the new TL with its Mask moved
# back before P's subtraction, out/sfo) against the parent (par_*) and both changes (new_*), d128 and d64
# causal, d128 no mask: numerics, TFLOPS in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/sfo/lib; ARGS=()
for f in out/sfo/*.cu; do n=$(basename "$f" .cu); ARGS+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build2.txt" 2>&1; grep -E "registers|fail" "$OUT/build2.txt"
timeout 60 python3 tests/gpu/bwd_check.py $L/fold_*.so > "$OUT/bwd_check2.txt" 2>&1; echo "bwd_check exit $?"; grep -E "^numerics" "$OUT/bwd_check2.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/{par,fold,new}_d128_causal.so $L/{par,fold,new}_d64_causal.so $L/{par,fold,new}_d128_none.so --bench \
  --shapes '1,4,4,300,300' --bench-shapes '2,32,8,8192,8192;1,32,8,16384,16384' --csv "$OUT/kernels2.csv" > "$OUT/bench2.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2.txt"; grep -E "TFLOPS|exit" "$OUT/bench2.txt"
