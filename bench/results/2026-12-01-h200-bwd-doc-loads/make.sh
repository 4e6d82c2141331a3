#!/usr/bin/env bash
# The translation units of run1.sh (out/docl), on the CPU machine: the document-mask backward (MHA and
# GQA) and forward as this tree translates them (_p), and make_var.py / make_fvar.py's variants.
#     bash bench/results/2026-12-01-h200-bwd-doc-loads/make.sh
set -euo pipefail
B=${BIN:-build}; D=bench/results/2026-12-01-h200-bwd-doc-loads; T=$(mktemp -d); O=out/docl
mkdir -p $O
unit() {  # name, backward or forward, plan flags
  local n="$1" kind="$2"; shift 2
  local extra=(); [ "$kind" = backward ] && extra=(--backward)
  "$B/qattn" plan "${extra[@]}" "$@" --gpu h100 --out "$T/$n" > /dev/null 2>&1
  "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 -o "$O/${n}_p.cu"
  "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 --flags > "$O/${n}_p.flags"
}
unit c backward --preset llama2-7b
unit doc backward --preset llama2-7b --document true
unit gdoc backward --preset llama3-8b --document true
unit fdoc forward --preset llama2-7b --document true
for v in f h h16; do python3 $D/make_var.py $O/doc_p.cu $O/doc_$v.cu $v; cp $O/doc_p.flags $O/doc_$v.flags; done
python3 $D/make_var.py $O/gdoc_p.cu $O/gdoc_h.cu h; cp $O/gdoc_p.flags $O/gdoc_h.flags
python3 $D/make_fvar.py $O/fdoc_p.cu $O/fdoc_h.cu; cp $O/fdoc_p.flags $O/fdoc_h.flags
rm -rf "$T"; ls $O
