#!/usr/bin/env bash
# A variant written only in TL (examples/tl/global_window.tl): sliding window + global tokens as a
# `Mask`, a per-head temperature (an auxiliary tensor) and a log-distance penalty as a `Score`.
# Then the same from the command line with --mask-mod / --score-mod. Finally, a wrong tile clause is
# a broken promise that the interpreter catches.
set -euo pipefail
Q=${1:-build/qattn}
TL=$(dirname "$0")/tl/global_window.tl
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q tl check "$TL"
$Q tl fmt --check "$TL"
$Q tl run "$TL" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=150,seqlen_k=150 --precision fp64
$Q tl run "$TL" --dims batch=1,heads_q=2,heads_kv=1,seqlen_q=100,seqlen_k=170 --precision storage
# The spec route: custom expressions are parsed by the planner and checked as TL declarations.
$Q plan --preset llama3.2-1b --gpu a100 --mask none \
  --mask-mod 'kv_idx <= q_idx + seqlen_k - seqlen_q and kv_idx >= q_idx + seqlen_k - seqlen_q - 40 or kv_idx < 8' \
  --score-mod 'score - 0.1 * log(1 + abs(q_idx + seqlen_k - seqlen_q - kv_idx))' --print | grep -E "^Score|^Mask|^for"
# Promise that no tile of the first rows is needed beyond the diagonal (false: global queries see
# every key): the skipped tiles change the output and the run fails with TL0801.
sed 's/^Mask global_window = \(.*\)$/Mask global_window = \1 empty when kv_lo > q_hi + seqlen_k - seqlen_q/' "$TL" > "$OUT/broken.tl"
grep "^Mask" "$OUT/broken.tl"
if $Q tl run "$OUT/broken.tl" --dims batch=1,heads_q=2,heads_kv=2,seqlen_q=150,seqlen_k=150 --precision fp64 2>"$OUT/err"; then
  echo "the broken promise was not caught"; exit 1
fi
grep -o "TL0801" "$OUT/err" | head -1
