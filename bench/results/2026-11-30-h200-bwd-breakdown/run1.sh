#!/usr/bin/env bash
# First device call (carried out/carry, out/gpu-py: main at a584494's stripped qattn and its libraries):
#  1. issue 19's backward table through the package with the TMA epilogue (83a699b): every config of
#     bench_backward.py, seqlens 2k-16k at 16k tokens, causal and not, against cuDNN and FlashAttention-2,
#     and the variants (softcap, window, documents: forward + backward against FlexAttention);
#  2. where each backward's time goes: bench/profile_backward.py (every kernel of one autograd.grad
#     call, qattn against cuDNN or FlexAttention, torch.profiler).
# Kernels are built first by parallel --warm jobs.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
T=(--no-variants --seqlens 2048,4096,8192,16384); V=(--configs '' --variants softcap,window,document)
JT=$(python3 bench/bench_backward.py --jobs "${T[@]}" 2>/dev/null | tail -1); JV=$(python3 bench/bench_backward.py --jobs "${V[@]}" 2>/dev/null | tail -1)
for i in $(seq 0 $((JT - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${T[@]}" > /dev/null 2>&1 & done
for i in $(seq 0 $((JV - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${V[@]}" > /dev/null 2>&1 & done
wait
echo "warm done at $SECONDS s" > "$OUT/bench.txt"
timeout 100 python3 bench/profile_backward.py "$OUT/profile.csv" > "$OUT/profile.txt" 2>&1
echo "profile exit $? at $SECONDS s" >> "$OUT/profile.txt"
timeout 200 python3 bench/bench_backward.py "$OUT/table.csv" "${T[@]}" >> "$OUT/bench.txt" 2>&1
echo "table exit $? at $SECONDS s" >> "$OUT/bench.txt"
timeout 150 python3 bench/bench_backward.py "$OUT/variants.csv" "${V[@]}" >> "$OUT/bench.txt" 2>&1
echo "variants exit $? at $SECONDS s" >> "$OUT/bench.txt"; grep -E "causal=|fwd / bwd|exit" "$OUT/bench.txt"
grep -E "wall|exit" "$OUT/profile.txt"
