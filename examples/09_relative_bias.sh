#!/usr/bin/env bash
# Relative position bias from a bucket table (T5-style, clamped instead of log-bucketed):
# s' = s + rel_bias[head, clamp(k - q - (seqlen_k - seqlen_q), -NB/2, NB/2 - 1) + NB/2], with the
# table an fp32 auxiliary input (heads_q, NB). Here on an encoder (no mask), NB = 32.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset bert-large --gpu a100 --relative-bias 32 --out "$OUT/relpos"
grep -E "NB|relpos" "$OUT/relpos/code.tl"
$Q tl run "$OUT/relpos/code.tl" --dims batch=1,heads_q=4,heads_kv=4,seqlen_q=200,seqlen_k=170 --precision storage
