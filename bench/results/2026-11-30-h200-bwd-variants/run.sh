#!/usr/bin/env bash
# Issue 19's forward + backward with softcap, a sliding window and a document mask against FlexAttention
# (torch.compile'd flex_attention with the same functions and block masks), llama2-7b MHA, seqlen 4096,
# batch 4, bf16, one process: bench_backward.py's variants at this tree (last measured 2026-11-27 /
# 2026-11-29, before the Hopper backward's float4 additions, TMA ring and named barriers). Kernels built
# first by parallel --warm jobs. Carried: out/carry, out/gpu-py.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
source tests/gpu/device_env.sh
A=(--configs '' --variants softcap,window,document)
J=$(python3 bench/bench_backward.py --jobs "${A[@]}" 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do timeout 300 python3 bench/bench_backward.py --warm $i "${A[@]}" > "$OUT/warm_$i.log" 2>&1 & done
wait
timeout 400 python3 bench/bench_backward.py "$OUT/results.csv" "${A[@]}" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "variant|fwd / bwd|exit" "$OUT/bench.txt"
