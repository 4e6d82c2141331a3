#!/usr/bin/env bash
# run3.sh's units, after make.sh and make2.sh (CPU machine): the document backward with the heads-first
# Grid (the TL's Grid line edited; doc_hf = that unit with make_var.py's h edit), and the per-visit
# stamped units (stamp_iter.py) of doc_h and the plain causal unit.
set -euo pipefail
B=${BIN:-build}; D=bench/results/2026-12-01-h200-bwd-doc-loads; O=out/docl; T=$(mktemp -d)
"$B/qattn" plan --backward --preset llama2-7b --document true --gpu h100 --out "$T/doc" > /dev/null 2>&1
sed 's/^Grid n_block = 0: cdiv(seqlen_k, BN), head = 0: heads_q, b = 0: batch$/Grid head = 0: heads_q, n_block = 0: cdiv(seqlen_k, BN), b = 0: batch/' \
  "$T/doc/code.tl" > $O/doc_hfirst.tl
grep -q '^Grid head = 0: heads_q, n_block' $O/doc_hfirst.tl
"$B/qattn_translate" $O/doc_hfirst.tl --gpu h100 -o "$T/hf.cu"
python3 $D/make_var.py "$T/hf.cu" $O/doc_hf.cu h && cp $O/doc_p.flags $O/doc_hf.flags
for u in doc_h c_p; do python3 $D/stamp_iter.py $O/st_$u.cu $O/it_$u.cu && cp $O/$u.flags $O/it_$u.flags; done
rm -rf "$T"
