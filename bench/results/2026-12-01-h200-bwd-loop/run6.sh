#!/usr/bin/env bash
# Sixth device call (carried out/carry, out/gpu-py: this tree at 79a2218, the pairs and arrive forms):
# issue 19's backward table and the variants through the package, each row timed both ways in one
# process (bench_backward.py --timing synced,queued: each call alone on an idle GPU, and calls issued
# back to back as a training step issues them).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
T=(--no-variants --seqlens 2048,4096,8192,16384); V=(--configs '' --variants softcap,window,document)
JT=$(python3 bench/bench_backward.py --jobs "${T[@]}" 2>/dev/null | tail -1); JV=$(python3 bench/bench_backward.py --jobs "${V[@]}" 2>/dev/null | tail -1)
for i in $(seq 0 $((JT - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${T[@]}" > /dev/null 2>&1 & done
for i in $(seq 0 $((JV - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${V[@]}" > /dev/null 2>&1 & done
wait
echo "warm done at $SECONDS s" > "$OUT/bench.txt"
timeout 330 python3 bench/bench_backward.py "$OUT/table.csv" "${T[@]}" >> "$OUT/bench.txt" 2>&1
echo "table exit $? at $SECONDS s" >> "$OUT/bench.txt"
timeout 130 python3 bench/bench_backward.py "$OUT/variants.csv" "${V[@]}" >> "$OUT/bench.txt" 2>&1
echo "variants exit $? at $SECONDS s" >> "$OUT/bench.txt"; grep -E "queued|fwd / bwd|exit|warm" "$OUT/bench.txt"
