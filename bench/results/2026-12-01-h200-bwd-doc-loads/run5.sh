#!/usr/bin/env bash
# One device call (carried out/carry, out/docl after make.sh - make5.sh): a diagnostic: does the
# document Mask's element loop (compiled in, run on a document's edge tiles only) slow every visit?
# nk_* (the loop removed) per visit (probe_doc.py) and kernel to kernel against doc_hf.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-12-01-h200-bwd-doc-loads
A=(); for u in doc_hf nk_doc_hf nk_ar_doc_hf it_nk_doc_hf it_nk_ar_doc_hf; do A+=(--cu "$u=out/docl/$u.cu"); done
bash tests/gpu/build_bwd_kernels.sh out/docllib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
L=out/docllib
timeout 150 python3 bench/bench_bwd_ab.py $L/doc_hf.so $L/nk_doc_hf.so $L/nk_ar_doc_hf.so \
  --shapes '4,32,32,4096,4096;2,32,32,8192,8192' --rounds 9 --csv "$OUT/ab_nk.csv" > "$OUT/ab.txt" 2>&1
echo "doc exit $? at $SECONDS s" >> "$OUT/ab.txt"; cat "$OUT/ab.txt"
for u in it_nk_doc_hf it_nk_ar_doc_hf; do
  timeout 60 python3 $D/probe_doc.py $L/$u.so --key-first 0 >> "$OUT/probe.txt" 2>&1; echo "$u exit $?" >> "$OUT/probe.txt"
done
cat "$OUT/probe.txt"
