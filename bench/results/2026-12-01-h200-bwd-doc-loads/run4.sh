#!/usr/bin/env bash
# One device call (carried out/carry, out/docl after make.sh - make4.sh): is a document visit's extra
# half microsecond the id reads? ar_* (ids computed from the index: same tiles, same elements, no
# loads; a diagnostic) against doc_h / doc_hf, kernel to kernel, and the per-visit stamps of ar_doc_h
# and doc_hf (heads-first Grid).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-12-01-h200-bwd-doc-loads
A=(); for u in doc_p doc_h doc_hf ar_doc_h ar_doc_hf it_ar_doc_h it_doc_hf; do A+=(--cu "$u=out/docl/$u.cu"); done
bash tests/gpu/build_bwd_kernels.sh out/docllib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
L=out/docllib
timeout 150 python3 bench/bench_bwd_ab.py $L/doc_p.so $L/doc_h.so $L/ar_doc_h.so $L/doc_hf.so $L/ar_doc_hf.so \
  --shapes '4,32,32,4096,4096;2,32,32,8192,8192' --rounds 9 --csv "$OUT/ab_arith.csv" > "$OUT/ab.txt" 2>&1
echo "doc exit $? at $SECONDS s" >> "$OUT/ab.txt"; cat "$OUT/ab.txt"
timeout 60 python3 $D/probe_doc.py $L/it_ar_doc_h.so >> "$OUT/probe.txt" 2>&1; echo "it_ar_doc_h exit $?" >> "$OUT/probe.txt"
timeout 60 python3 $D/probe_doc.py $L/it_doc_hf.so --key-first 0 >> "$OUT/probe.txt" 2>&1; echo "it_doc_hf exit $?" >> "$OUT/probe.txt"
cat "$OUT/probe.txt"
