#!/usr/bin/env bash
# out/dqb: the first five calls' variants of the planner's d128 TL (causal, no mask) as translated at the
# parent 09a0089 (build/ of that commit: BIN=...), made by variants.py ... variants5.py.
set -euo pipefail
BIN="${BIN:-build}"; OUT=out/dqb; D=bench/results/2026-11-30-h200-bwd-dq-adds; mkdir -p "$OUT"
for m in causal none; do
  tl=$(mktemp); cu=$(mktemp --suffix=.cu)
  "$BIN/qattn" plan --preset llama3-8b --mask $m --backward --gpu h100 --print 2>/dev/null | sed -n '/^Kernel/,$p' > "$tl"
  "$BIN/qattn_translate" "$tl" --gpu h100 -o "$cu"
  python3 $D/scripts/variants.py "$cu" "$OUT" $m
  python3 $D/scripts/variants2.py "$OUT/base_$m.cu" "$OUT/bulk_$m.cu" "$OUT" $m
  python3 $D/scripts/variants3.py "$OUT/base_$m.cu" "$OUT/v4_$m.cu" "$OUT" $m
  python3 $D/scripts/variants4.py "$OUT/base_$m.cu" "$OUT/v4_$m.cu" "$OUT" $m
  python3 $D/scripts/variants5.py "$OUT/base_$m.cu" "$OUT" $m
  for v in base bulk nodq swap_base swap_bulk v4 big nof1 nof2 nof12 v4nof12 s3 s3v4 sh4; do
    "$BIN/qattn_translate" "$tl" --gpu h100 --flags > "$OUT/${v}_$m.flags"
  done
  rm -f "$tl" "$cu"
done
