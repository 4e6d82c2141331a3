#!/usr/bin/env bash
# Eighth device call (the thirty-fifth session; carried out/carry, out/gpu-py: this tree with the d64
# XOR2 form, cf6ff9b + head_dim_v > head_dim_qk): issue 19's backward table and the variants through the
# package as run6.sh, then (bench/results/2026-12-01-h200-wide-v) V wider than Q and K against cuDNN's
# SDPA: bench_backward.py --configs gqa-64-128,mha-128-256 (FlashAttention-2 has no such head dims).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
T=(--no-variants --seqlens 2048,4096,8192,16384); V=(--configs '' --variants softcap,window,document)
W=(--no-variants --seqlens 2048,8192 --configs gqa-64-128,mha-128-256 --timing queued)
JT=$(python3 bench/bench_backward.py --jobs "${T[@]}" 2>/dev/null | tail -1); JV=$(python3 bench/bench_backward.py --jobs "${V[@]}" 2>/dev/null | tail -1)
JW=$(python3 bench/bench_backward.py --jobs "${W[@]}" 2>/dev/null | tail -1)
for i in $(seq 0 $((JT - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${T[@]}" > /dev/null 2>&1 & done
for i in $(seq 0 $((JV - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${V[@]}" > /dev/null 2>&1 & done
for i in $(seq 0 $((JW - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${W[@]}" > /dev/null 2>&1 & done
wait
echo "warm done at $SECONDS s" > "$OUT/bench.txt"
timeout 330 python3 bench/bench_backward.py "$OUT/table.csv" "${T[@]}" >> "$OUT/bench.txt" 2>&1
echo "table exit $? at $SECONDS s" >> "$OUT/bench.txt"
timeout 130 python3 bench/bench_backward.py "$OUT/variants.csv" "${V[@]}" >> "$OUT/bench.txt" 2>&1
echo "variants exit $? at $SECONDS s" >> "$OUT/bench.txt"
timeout 100 python3 bench/bench_backward.py "$OUT/widev.csv" "${W[@]}" >> "$OUT/bench.txt" 2>&1
echo "wide v exit $? at $SECONDS s" >> "$OUT/bench.txt"; grep -E "queued|exit|warm" "$OUT/bench.txt"
