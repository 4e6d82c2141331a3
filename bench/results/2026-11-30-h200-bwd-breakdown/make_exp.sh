#!/usr/bin/env bash
# The translation units of run2.sh / run3.sh (out/exp), on the CPU machine at main a584494:
#   doc_base / doc_nv16: the llama2-7b document backward, and the same with 16 tiles' clauses a round;
#   gqa_atomic_{none,causal}: llama3-8b's GQA backward (fp32 dK, dV additions);
#   gqa_perhead_{none,causal}: its MHA form (--heads 32,32) with dK, dV allocated per query head
#   ([b, head]), their TMA maps over heads_q and the launcher's MHA-only check removed.
set -euo pipefail
B=${BIN:-build}; T=$(mktemp -d); mkdir -p out/exp
"$B/qattn" plan --backward --preset llama2-7b --document true --gpu h100 --out "$T/doc" > /dev/null
"$B/qattn_translate" "$T/doc/code.tl" --gpu h100 -o out/exp/doc_base.cu
"$B/qattn_translate" "$T/doc/code.tl" --gpu h100 --flags > out/exp/doc_base.flags
sed 's/next_visible<4, 1>/next_visible<16, 1>/' out/exp/doc_base.cu > out/exp/doc_nv16.cu; cp out/exp/doc_base.flags out/exp/doc_nv16.flags
for m in none causal; do
  f=(); [ $m = none ] && f=(--mask none)
  "$B/qattn" plan --backward --preset llama3-8b "${f[@]}" --gpu h100 --out "$T/gqa_$m" > /dev/null
  "$B/qattn_translate" "$T/gqa_$m/code.tl" --gpu h100 -o out/exp/gqa_atomic_$m.cu
  "$B/qattn_translate" "$T/gqa_$m/code.tl" --gpu h100 --flags > out/exp/gqa_atomic_$m.flags
  "$B/qattn" plan --backward --preset llama3-8b "${f[@]}" --heads 32,32 --gpu h100 --out "$T/mha_$m" > /dev/null
  sed -e 's/^\(Allocate d[KV] in global (seqlen_k, d) bf16 with offset \[b, \)kv_head\]/\1head]/' "$T/mha_$m/code.tl" > "$T/ph_$m.tl"
  "$B/qattn_translate" "$T/ph_$m.tl" --gpu h100 -o out/exp/gqa_perhead_$m.cu
  sed -i -E -e 's/(make_tile_map\(&tad[KV], p\.d[kv], true, 128, p\.seqlen_k, )p\.heads_kv/\1p.heads_q/' \
    -e '/if \(p.heads_q != p.heads_kv\) return qattn::host::fail\(QATTN_ERR_SHAPE, "this backward kernel stores dK/d' out/exp/gqa_perhead_$m.cu
  cp out/exp/gqa_atomic_$m.flags out/exp/gqa_perhead_$m.flags
done
rm -rf "$T"
