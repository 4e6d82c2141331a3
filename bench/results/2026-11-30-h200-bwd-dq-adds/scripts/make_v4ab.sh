#!/usr/bin/env bash
# out/v4ab: each config's backward TL (the rules engine's), this tree's translation (new_*) and the same
# CUDA with the parent's pair-wise reductions (par_*: 09a0089's output), with their nvcc flags; then the
# eighth call's variants (variants6.py). Run from the repository root after scripts/build.sh.
set -euo pipefail
OUT=out/v4ab; D=bench/results/2026-11-30-h200-bwd-dq-adds; mkdir -p "$OUT"
for c in "d64_causal|--preset llama3.2-1b" "d64_none_mha|--preset llama3.2-1b --mask none --heads 16,16" \
         "d128_causal|--preset llama3-8b" "d128_none|--preset llama3-8b --mask none" "d256_causal|--preset llama3-8b --head-dim 256" \
         "mla_causal|--preset deepseek-v3-mla-prefill" "mla_none|--preset deepseek-v3-mla-prefill --mask none" \
         "d192_causal|--preset llama3-8b --head-dim 192"; do
  n=${c%%|*}; f=${c#*|}; tmp=$(mktemp -d)
  # shellcheck disable=SC2086
  build/qattn plan --backward $f --gpu h100 --out "$tmp/p" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  cp "$tmp/p/code.tl" "$OUT/$n.tl"; rm -rf "$tmp"
  build/qattn_translate "$OUT/$n.tl" --gpu h100 -o "$OUT/new_$n.cu"
  build/qattn_translate "$OUT/$n.tl" --gpu h100 --flags > "$OUT/new_$n.flags"
  sed 's/qattn::sm90::add_acc_global_v4</qattn::add_acc_global</' "$OUT/new_$n.cu" > "$OUT/par_$n.cu"
  cp "$OUT/new_$n.flags" "$OUT/par_$n.flags"
done
for m in causal none; do
  python3 $D/scripts/variants6.py "$OUT/new_d128_$m.cu" "$OUT" "d128_$m"
  for v in v2t sh4t; do cp "$OUT/new_d128_$m.flags" "$OUT/${v}_d128_$m.flags"; done
done
