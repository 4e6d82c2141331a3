#!/usr/bin/env bash
# DeepSeek-V3's absorbed-MLA decoding (docs/spec.md `v_from_k`, docs/translation.md "Split columns"):
# 128 query heads of d 576 over one latent cache whose first 512 columns are V. The Hopper plan reads V
# as a view of K's shared tile (`{view: K}`: no V in global memory, no second load), lets two consumer
# warpgroups share the 64 query rows (`split columns`: 256 of O's 512 columns each), stages P in shared
# memory and packs the 128 heads into two 64-row tiles. The TL is interpreted against the reference
# (V = K's first 512 columns) over a paged cache with a partial last page; an A100 is refused.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
MLA="--preset deepseek-v3-mla-prefill --heads 128/1 --head-dim 576/512 --v-from-k true --kv-cache paged --mask none"
# shellcheck disable=SC2086
$Q plan $MLA --gpu h100 --seqlen 1/4096 --out "$OUT/mla"
grep -E "^Role|view|^Allocate (V|Pc)|Copy Pc|GEMM Pc" "$OUT/mla/code.tl"
if grep -q "Allocate V in global" "$OUT/mla/code.tl"; then echo "the plan should have no global V" >&2; exit 1; fi
$Q tl run "$OUT/mla/code.tl" --dims batch=2,heads_q=4,heads_kv=1,seqlen_q=1,seqlen_k=300,page_size=64,pages=5 --precision fp64
# shellcheck disable=SC2086
if $Q plan $MLA --gpu a100 --seqlen 1/4096 --out "$OUT/a100" 2> "$OUT/a100.txt"; then echo "an A100 plan should be refused" >&2; exit 1; fi
grep -E "PLAN0103" "$OUT/a100.txt"
