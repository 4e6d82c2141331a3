#!/usr/bin/env bash
# ALiBi (BLOOM, MPT): s' = s - slope[head] * |q + seqlen_k - seqlen_q - k|. The slopes are an
# auxiliary fp32 input of the kernel (`Allocate alibi_slopes in global (heads_q) fp32`, aux[0]);
# the interpreter fills it with random values and checks the TL against the C++ formula.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama3.2-1b --gpu t4 --dtype fp16 --alibi --out "$OUT/alibi"
grep -E "alibi" "$OUT/alibi/code.tl"
$Q tl run "$OUT/alibi/code.tl" --dims batch=1,heads_q=4,heads_kv=2,seqlen_q=140,seqlen_k=140 --precision storage
