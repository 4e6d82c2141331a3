#!/usr/bin/env bash
# Third call: Nsight Compute on base / v4 / nodq (causal, b2 h32/8 s8192) and cuDNN's backward on the same
# inputs: L2 / DRAM throughput, the reduction sectors, stall reasons (tests/gpu/profile_bwd.py).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/dqb/lib; ARGS=()
for v in base v4 nodq; do ARGS+=(--cu "${v}_causal=out/dqb/${v}_causal.cu"); done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build3.txt" 2>&1; echo "build exit $?" >> "$OUT/build3.txt"; cat "$OUT/build3.txt"
timeout 400 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --metrics lts__t_sectors_op_red.sum,lts__t_requests_op_red.sum,lts__t_sectors_op_read.sum,lts__average_t_sector_hit_rate_realtime.pct \
  -k 'regex:flash_bwd_llama3_8b_sm90$|bprop|dgrad|sdpa' python3 tests/gpu/profile_bwd.py $L/base_causal.so $L/v4_causal.so $L/nodq_causal.so \
  > "$OUT/ncu.txt" 2>&1
echo "ncu exit $?" >> "$OUT/ncu.txt"
grep -E "^  [a-z_]|Duration|Throughput|Stall|Issued|Eligible|red.sum|op_read|hit_rate|Warp Cycles|exit" "$OUT/ncu.txt" | head -150
