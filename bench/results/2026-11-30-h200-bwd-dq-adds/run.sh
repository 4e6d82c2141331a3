#!/usr/bin/env bash
# dQ's per-iteration addition in the d128 backward on Hopper: red.global.add.v2 per value pair (base,
# the planner's TL as translated at 09a0089) against rows staged in shared memory and added by the
# TMA unit's bulk reductions (bulk: qattn::sm90::add_acc_global_bulk), and without the addition
# (nodq: timing only). Numerics of base / bulk, then TFLOPS of all six libraries in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh  # CUTLASS extracted
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/dqb/lib; ARGS=()
for v in base bulk nodq; do for m in causal none; do ARGS+=(--cu "${v}_$m=out/dqb/${v}_$m.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"; cat "$OUT/build.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/base_causal.so $L/bulk_causal.so $L/base_none.so $L/bulk_none.so --random 8 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|exit" "$OUT/bwd_check.txt" | tail -8
timeout 240 python3 tests/gpu/bwd_check.py $L/base_causal.so $L/bulk_causal.so $L/nodq_causal.so $L/base_none.so $L/bulk_none.so $L/nodq_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;4,32,8,4096,4096;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt"
which ncu nsys 2>&1 | head -2
