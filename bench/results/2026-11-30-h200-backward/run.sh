#!/usr/bin/env bash
# Issue 19's backward table after the wgmma forms of d192 / d256 / MLA: every config of
# bench_backward.py (MHA / GQA / MQA d128, d64, d256, MLA 192/128), seqlens 2k-16k at 16k tokens,
# causal and not, against cuDNN and FlashAttention-2 (SDPA backends) in one process; the kernels are
# built first by parallel --warm jobs (the disk cache keeps them). Carried: out/carry, out/gpu-py.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
source tests/gpu/device_env.sh  # CUTLASS extracted, the package on the carried compiler
J=$(python3 bench/bench_backward.py --jobs --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do timeout 300 python3 bench/bench_backward.py --warm $i --no-variants > "$OUT/warm_$i.log" 2>&1 & done
wait
grep -h "built" "$OUT"/warm_*.log | wc -l
timeout 280 python3 bench/bench_backward.py "$OUT/results.csv" --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "causal=|exit" "$OUT/bench.txt"
