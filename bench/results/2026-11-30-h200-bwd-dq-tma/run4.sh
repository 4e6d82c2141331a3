#!/usr/bin/env bash
# Fourth device call: through the package (qattn.attention under autograd, this tree in out/gpu-py).
#  1. issue 19's backward table: every config of bench_backward.py, seqlens 2k-16k at 16k tokens,
#     causal and not, against cuDNN and FlashAttention-2 (SDPA backends) in one process (table.csv);
#  2. forward + backward with softcap, a sliding window and documents against FlexAttention, with the
#     parent's kernels in the same process (--also base: main before this change, out/ab/base's device/
#     and stripped qattn) (variants.csv);
#  3. the package's training tests that cover the new path (tests/python/test_gpu_training.py -k).
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
timeout 200 python3 bench/bench_backward.py "$OUT/table.csv" "${T[@]}" > "$OUT/bench.txt" 2>&1
echo "table exit $?" >> "$OUT/bench.txt"
timeout 220 python3 bench/bench_backward.py "$OUT/variants.csv" "${V[@]}" --also base=out/ab/base/device:out/ab/base/qattn >> "$OUT/bench.txt" 2>&1
echo "variants exit $?" >> "$OUT/bench.txt"; grep -E "causal=|fwd / bwd|speed vs|exit" "$OUT/bench.txt"
. tests/gpu/pytest_env.sh
timeout 100 python3 -m pytest tests/python/test_gpu_training.py -q -p no:cacheprovider -k "refuses or matches_autograd or deterministic" \
  > "$OUT/pytest_training.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_training.txt"; tail -3 "$OUT/pytest_training.txt"
