#!/usr/bin/env bash
# Second call (variants2.py): is dQ's addition slow for contention (swap_*: the grid's x and y exchanged),
# for the vector width of the reductions (v4: red.global.add.v4.f32 of restaged rows) or for the
# per-operation cost of small bulk reductions (big: one 4 KB bulk reduction per warp; timing only)?
# base and bulk again as the same process's reference.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh  # CUTLASS extracted
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/dqb/lib; ARGS=()
for v in base bulk swap_base swap_bulk v4 big; do for m in causal none; do ARGS+=(--cu "${v}_$m=out/dqb/${v}_$m.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build2.txt" 2>&1; echo "build exit $?" >> "$OUT/build2.txt"; cat "$OUT/build2.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/{swap_base,swap_bulk,v4}_{causal,none}.so --random 4 > "$OUT/bwd_check2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check2.txt"; grep -E "numerics|FAIL|exit" "$OUT/bwd_check2.txt" | tail -8
timeout 300 python3 tests/gpu/bwd_check.py $L/{base,bulk,swap_base,swap_bulk,v4,big}_causal.so $L/{base,bulk,swap_base,swap_bulk,v4,big}_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels2.csv" > "$OUT/bench2.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2.txt"; grep -E "TFLOPS|exit" "$OUT/bench2.txt"
