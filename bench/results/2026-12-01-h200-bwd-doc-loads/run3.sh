#!/usr/bin/env bash
# One device call (carried out/carry, out/docl after make.sh, make2.sh, make3.sh): the heads-first
# Grid for the document backward (doc_hf) against doc_h and this tree's unit, and each visit's
# duration by its place in the block (probe_doc.py on stamp_iter.py's units).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-12-01-h200-bwd-doc-loads
A=(); for u in doc_p doc_h doc_hf it_doc_h it_c_p; do A+=(--cu "$u=out/docl/$u.cu"); done
bash tests/gpu/build_bwd_kernels.sh out/docllib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
L=out/docllib
timeout 150 python3 bench/bench_bwd_ab.py $L/doc_p.so $L/doc_h.so $L/doc_hf.so \
  --shapes '4,32,32,4096,4096;2,32,32,8192,8192;8,32,32,2048,2048' --rounds 9 --csv "$OUT/ab_doc_hf.csv" > "$OUT/ab.txt" 2>&1
echo "doc exit $? at $SECONDS s" >> "$OUT/ab.txt"; cat "$OUT/ab.txt"
timeout 60 python3 $D/probe_doc.py $L/it_doc_h.so >> "$OUT/probe.txt" 2>&1; echo "it_doc_h exit $?" >> "$OUT/probe.txt"
timeout 60 python3 $D/probe_doc.py $L/it_c_p.so --key-first 0 --shape 16,32,1024 >> "$OUT/probe.txt" 2>&1; echo "it_c_p exit $?" >> "$OUT/probe.txt"
cat "$OUT/probe.txt"
