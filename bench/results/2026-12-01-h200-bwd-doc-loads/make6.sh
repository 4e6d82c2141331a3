#!/usr/bin/env bash
# run6.sh's units (CPU machine): every backward with a `{skip}` loop, translated by this tree (_n) and by
# the parent (_p; PARENT_BIN: a build of the parent commit's qattn / qattn_translate), each from its own
# planner's TL; the sm80 form also as PTX (this GPU runs it); the planted document bug from this tree.
#     PARENT_BIN=/path/to/parent/build bash bench/results/2026-12-01-h200-bwd-doc-loads/make6.sh
set -euo pipefail
B=${BIN:-build}; P=${PARENT_BIN:?the parent build}; O=out/docl6; T=$(mktemp -d)
mkdir -p $O
for cfg in "doc|--preset llama2-7b --document true|h100" "gdoc|--preset llama3-8b --document true|h100" \
           "doc64n|--preset llama3.2-1b --document true --mask none --heads 16,16|h100" \
           "plm|--preset llama2-7b --prefix-lm 64 --mask none|h100" "docfp16|--preset llama2-7b --document true --dtype fp16|h100" \
           "a100doc|--preset llama2-7b --document true|a100"; do
  IFS='|' read -r n f gpu <<< "$cfg"
  for side in n p; do
    bin=$B; [ $side = p ] && bin=$P
    # shellcheck disable=SC2086
    "$bin/qattn" plan --backward $f --gpu $gpu --out "$T/${n}_$side" > /dev/null 2>&1
    "$bin/qattn_translate" "$T/${n}_$side/code.tl" --gpu $gpu -o "$O/${n}_$side.cu"
    "$bin/qattn_translate" "$T/${n}_$side/code.tl" --gpu $gpu --flags | sed 's/code=sm_80/code=[sm_80,compute_80]/' > "$O/${n}_$side.flags"
  done
  cmp -s "$O/${n}_n.cu" "$O/${n}_p.cu" && echo "$n: the same unit"
done
"$B/qattn" plan --backward --preset llama3.2-1b --document true --gpu h100 --out "$T/neg" > /dev/null 2>&1
sed 's/seg_q\[b, q_hi\] < seg_k/seg_q[b, q_hi] <= seg_k/' "$T/neg/code.tl" > "$T/neg.tl"
"$B/qattn_translate" "$T/neg.tl" --gpu h100 -o $O/neg_doc_clause.cu && "$B/qattn_translate" "$T/neg.tl" --gpu h100 --flags > $O/neg_doc_clause.flags
rm -rf "$T"; ls $O | wc -l
