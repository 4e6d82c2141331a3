#!/usr/bin/env bash
# Document masking of packed sequences: queries see only keys of their own document, given by
# segment ids (int32 auxiliary inputs seg_q (batch, seqlen_q) and seg_k (batch, seqlen_k),
# nondecreasing). Here from a JSON spec, on top of the causal mask. The declared clauses let the
# loop skip tile pairs of different documents.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cat > "$OUT/spec.json" <<'JSON'
{
  "preset": "llama3.2-1b",
  "name": "packed-causal",
  "variants": {"document": true}
}
JSON
$Q spec show --spec "$OUT/spec.json"
$Q plan --spec "$OUT/spec.json" --gpu a100 --out "$OUT/doc"
grep -E "seg_|^for" "$OUT/doc/code.tl"
$Q tl run "$OUT/doc/code.tl" --dims batch=2,heads_q=2,heads_kv=2,seqlen_q=260,seqlen_k=260 --precision fp64
