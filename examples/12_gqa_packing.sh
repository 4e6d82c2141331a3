#!/usr/bin/env bash
# GQA packing for short query sequences (decoding, chunked prefill over a KV cache): with a stated
# query length (--seqlen 16/4096) the Hopper plan puts the 4 query heads of each Llama-3 kv head
# into one tile (`{pack: heads_q / heads_kv}` on Q and O); without one (prefill) it does not. The
# packed TL is interpreted against the reference, here with a causal chunk of 16 queries at the end
# of a 200-key cache and 8 query heads per kv head.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama3-8b --gpu h100 --seqlen 16/4096 --out "$OUT/chunk"
grep -E "^Grid|pack|^for" "$OUT/chunk/code.tl"
$Q tl run "$OUT/chunk/code.tl" --dims batch=2,heads_q=16,heads_kv=2,seqlen_q=16,seqlen_k=200 --precision fp64
$Q plan --preset llama3-8b --gpu h100 --out "$OUT/prefill"
if grep -q "pack" "$OUT/prefill/code.tl"; then echo "prefill plan should not pack" >&2; exit 1; fi
echo "prefill (no stated length): one query head per tile"
