#!/usr/bin/env bash
# Sliding-window attention is the built-in kernel mask `window(L, R)` (--window L,R; Mistral:
# 4096,0): the loop bounds skip the tiles outside the band. Combined here with a softcap, as in
# Gemma 2's local layers (--window 4096,0 --softcap 50; a smaller window shows at small sizes).
# The planner writes both over the TL's launch arguments (window_left, window_right, softcap): the
# kernel takes them at run time, so the same TL runs here with other windows (-1: unbounded).
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama3.2-1b --gpu h100 --window 64,0 --softcap 50 --out "$OUT/local"
grep -E "^Kernel|^for|with window|^Score" "$OUT/local/code.tl"
for w in 64,0 200,16 -1,5; do
  $Q tl run "$OUT/local/code.tl" --dims batch=1,heads_q=2,heads_kv=1,seqlen_q=300,seqlen_k=300 --precision fp64 --window $w --softcap 50
done
