#!/usr/bin/env bash
# On the CPU machine: the A/B translation units of the same TL programs (../2026-11-30-h200-bwd-dq-tma's
# configs). par_NAME.cu: main at 24cac2e (dQ by TMA; the first ring slot issued after the K, V copies
# landed), by out/ab/pro_base/qattn_translate; new_NAME.cu: this tree's (build/: the first ring slot
# issued while K, V are in flight).
set -euo pipefail
D=out/pro; mkdir -p "$D"
for n in d128_causal d128_none d128_causal_mha d64_causal d64_none_mha d128_window_mha d128_doc; do
  tl=out/dqtma/$n.tl
  out/ab/pro_base/qattn_translate "$tl" --gpu h100 -o "$D/par_$n.cu" >/dev/null
  out/ab/pro_base/qattn_translate "$tl" --gpu h100 --flags > "$D/par_$n.flags"
  build/qattn_translate "$tl" --gpu h100 -o "$D/new_$n.cu" >/dev/null
  build/qattn_translate "$tl" --gpu h100 --flags > "$D/new_$n.flags"
  echo "$n: $(diff "$D/par_$n.cu" "$D/new_$n.cu" | grep -c '^[<>]') lines differ"
done
