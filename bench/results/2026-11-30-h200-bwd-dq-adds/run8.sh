#!/usr/bin/env bash
# Eighth call (variants6.py): dQ's additions with addresses computed once (v2t: red.v2, sh4t: red.v4 after
# the quad-pair shuffle) against the parent (par) and the lowering's add_acc_global_v4 (new): numerics,
# TFLOPS in one process, executed instructions (Nsight Compute). Carried: out/carry, out/v4ab, out/dqb.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/v4ab/lib; ARGS=()
for v in par new v2t sh4t; do for m in causal none; do ARGS+=(--cu "${v}_d128_$m=out/v4ab/${v}_d128_$m.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build8.txt" 2>&1; echo "build exit $?" >> "$OUT/build8.txt"; cat "$OUT/build8.txt"
timeout 120 python3 tests/gpu/bwd_check.py $L/{v2t,sh4t}_d128_{causal,none}.so --random 4 > "$OUT/bwd_check8.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check8.txt"; grep -E "numerics|FAIL|exit" "$OUT/bwd_check8.txt" | tail -6
timeout 200 python3 tests/gpu/bwd_check.py $L/{par,new,v2t,sh4t}_d128_causal.so $L/{par,new,v2t,sh4t}_d128_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels8.csv" > "$OUT/bench8.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench8.txt"; grep -E "TFLOPS|exit" "$OUT/bench8.txt"
timeout 120 ncu --metrics smsp__inst_executed.sum -k 'regex:flash_bwd_llama3_8b_sm90$' python3 tests/gpu/profile_bwd.py --no-cudnn \
  $L/{new,v2t,sh4t}_d128_causal.so > "$OUT/ncu8.txt" 2>&1
echo "ncu exit $?" >> "$OUT/ncu8.txt"; grep -E "inst_executed.sum|exit" "$OUT/ncu8.txt"
