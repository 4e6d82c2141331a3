#!/usr/bin/env bash
# Prefix-LM (T5/UL2, PaliGemma): the first P keys are seen by every query (a bidirectional prefix),
# the rest causally. `--prefix-lm 64` replaces the preset's causal mask by a TL `Mask prefix_lm`
# with its tile clauses (`empty when` / `full when`), and the key loop skips empty tiles
# (`{skip: prefix_lm}`).
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama3.2-1b --gpu h100 --prefix-lm 64 --out "$OUT/prefix"
grep -E "^Kernel|^Mask|^for|with prefix_lm" "$OUT/prefix/code.tl"
$Q tl run "$OUT/prefix/code.tl" --dims batch=2,heads_q=2,heads_kv=1,seqlen_q=300,seqlen_k=300 --precision fp64
# A causal mask next to prefix_lm is refused (SPEC0213): prefix-LM is already causal past the prefix.
if $Q spec show --preset llama3.2-1b --prefix-lm 64 --mask causal 2>"$OUT/err"; then exit 1; fi
grep SPEC0213 "$OUT/err"
