#!/usr/bin/env bash
# The combine schedules of bench/results/2026-11-26-h200-combine/combine_tiles.*: the planner's TL
# (`qattn plan --combine`) with its `Const BM, WARPS` line edited, translated and compiled; the
# *_unroll4 libraries add `#pragma unroll 4` before the loop over the parts in the generated CUDA
# (an experiment on the lowering, not what it emits). Needs nvcc and the CUTLASS headers.
#   bash bench/build_combine_variants.sh OUT_DIR [QATTN_BUILD_DIR]
# then: python3 bench/bench_combine.py combine_tiles.csv bm4w4=OUT_DIR/bm4w4.so bm1w1=OUT_DIR/bm1w1.so ...
set -euo pipefail
OUT=${1:?usage: build_combine_variants.sh OUT_DIR [BUILD_DIR]}
B=${2:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CUTLASS=${QATTN_CUTLASS_INCLUDE:-$ROOT/.cutlass/include}
mkdir -p "$OUT"
"$B/qattn" plan --preset llama3-8b --gpu h100 --combine --print 2>/dev/null > "$OUT/planner.tl"
for v in "4 4" "1 1" "2 2" "4 1" "8 4"; do
  set -- $v
  sed -E "s/^Const BM = [0-9]+, WARPS = [0-9]+/Const BM = $1, WARPS = $2/" "$OUT/planner.tl" > "$OUT/bm$1w$2.tl"
done
flags=$("$B/qattn_translate" "$OUT/planner.tl" --gpu h100 --flags)
for tl in "$OUT"/bm*.tl; do
  n=$(basename "$tl" .tl)
  "$B/qattn_translate" "$tl" --gpu h100 -o "$OUT/$n.cu"
  sed 's/^  for (int s = 0; s < splits; ++s) {/  #pragma unroll 4\n  for (int s = 0; s < splits; ++s) {/' "$OUT/$n.cu" > "$OUT/${n}u.cu"
done
for cu in "$OUT"/bm*.cu; do
  # shellcheck disable=SC2086
  nvcc $flags -Xcompiler -fPIC -shared -I "$ROOT/include" -I "$ROOT/device" -I "$CUTLASS" -diag-suppress 177 \
    -o "${cu%.cu}.so" "$cu" &
done
wait
ls "$OUT"/*.so
