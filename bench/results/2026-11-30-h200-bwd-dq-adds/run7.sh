#!/usr/bin/env bash
# Seventh call: (1) Nsight Compute's executed-instruction counts per opcode for the d128 causal kernel
# before (par), after (new) and without dQ's additions (nodq, timing only), b2 h32/8 s8192; (2) issue 19's
# backward table through the package at this tree (bench_backward.py, every config, 2k-16k, one process;
# kernels built first by parallel --warm jobs). Carried: out/carry, out/gpu-py, out/v4ab, out/dqb.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
J=$(python3 bench/bench_backward.py --jobs --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do timeout 300 python3 bench/bench_backward.py --warm $i --no-variants > "$OUT/warm_$i.log" 2>&1 & done
L=out/v4ab/lib
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' --cu par_d128_causal=out/v4ab/par_d128_causal.cu --cu new_d128_causal=out/v4ab/new_d128_causal.cu \
  --cu nodq_d128_causal=out/dqb/nodq_causal.cu -j 3 > "$OUT/build7.txt" 2>&1
cat "$OUT/build7.txt"
timeout 200 ncu --metrics smsp__inst_executed.sum,sass__inst_executed_per_opcode --print-metric-instances values \
  -k 'regex:flash_bwd_llama3_8b_sm90$' python3 tests/gpu/profile_bwd.py --no-cudnn $L/{par,new,nodq}_d128_causal.so > "$OUT/ncu7.txt" 2>&1
echo "ncu exit $?" >> "$OUT/ncu7.txt"; grep -E "inst_executed.sum|exit" "$OUT/ncu7.txt"
wait
grep -h "built" "$OUT"/warm_*.log | wc -l
timeout 280 python3 bench/bench_backward.py "$OUT/results.csv" --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "causal=|exit" "$OUT/bench.txt"
