#!/usr/bin/env bash
# The TL is the source of truth: remove the rescale of the O accumulator from generated TL code and
# the interpreter reports that the program no longer computes attention (TL0801).
set -uo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama2-7b --gpu a100 --print > "$OUT/code.tl" 2>/dev/null || exit 1
grep -v "Compute Rescale O, alpha" "$OUT/code.tl" > "$OUT/buggy.tl"
$Q tl check "$OUT/buggy.tl" || exit 1          # still a well-formed program...
if $Q tl run "$OUT/buggy.tl" --dims batch=1,heads_q=2,heads_kv=2,seqlen_q=200,seqlen_k=300 --precision fp64; then
  echo "the buggy program was not caught"; exit 1
fi
echo "caught: without the rescale the kernel is wrong, as it should be"
