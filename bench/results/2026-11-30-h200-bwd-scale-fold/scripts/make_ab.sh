#!/usr/bin/env bash
# out/sfab and out/sfo: the TL programs of this experiment (tl/: par_* the rules engine's at 12354fb,
# new_* with planner.patch applied: softmax_scale folded into dS and the masks on P, fold_* new_* with
# the Mask moved back onto S) translated by this tree's qattn_translate. Run from the repository root
# after scripts/build.sh.
set -euo pipefail
F=bench/results/2026-11-30-h200-bwd-scale-fold
mkdir -p out/sfab out/sfo
for tl in "$F"/tl/*.tl; do
  n=$(basename "$tl" .tl)
  out=out/sfab; [[ "$n" == fold_* ]] && out=out/sfo
  build/qattn_translate "$tl" --gpu h100 -o "$out/$n.cu"
  build/qattn_translate "$tl" --gpu h100 --flags > "$out/$n.flags"
done
# the second call's set: fold_* with the parent's and the new program of the same configs
for n in d128_causal d64_causal d128_none; do
  for v in par new; do cp "out/sfab/${v}_$n.cu" "out/sfab/${v}_$n.flags" out/sfo/; done
done
