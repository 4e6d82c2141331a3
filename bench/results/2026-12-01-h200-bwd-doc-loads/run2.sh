#!/usr/bin/env bash
# One device call (carried out/carry, out/docl from make.sh + make2.sh): doc_n (only the next tile's
# clause read at the top) against doc_h and this tree's unit, and the stamped blocks (probe_doc.py)
# of this tree's document unit, doc_h and the plain causal unit on the same shape.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-12-01-h200-bwd-doc-loads
A=(); for u in doc_p doc_n doc_h st_doc_p st_doc_h st_c_p; do A+=(--cu "$u=out/docl/$u.cu"); done
bash tests/gpu/build_bwd_kernels.sh out/docllib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
L=out/docllib
timeout 150 python3 bench/bench_bwd_ab.py $L/doc_p.so $L/doc_n.so $L/doc_h.so \
  --shapes '4,32,32,4096,4096;2,32,32,8192,8192;8,32,32,2048,2048' --rounds 9 --csv "$OUT/ab_doc_n.csv" > "$OUT/ab.txt" 2>&1
echo "doc exit $? at $SECONDS s" >> "$OUT/ab.txt"; cat "$OUT/ab.txt"
for u in st_doc_p st_doc_h; do timeout 60 python3 $D/probe_doc.py $L/$u.so >> "$OUT/probe.txt" 2>&1; echo "$u exit $?" >> "$OUT/probe.txt"; done
timeout 60 python3 $D/probe_doc.py $L/st_c_p.so --key-first 0 >> "$OUT/probe.txt" 2>&1; echo "st_c_p exit $?" >> "$OUT/probe.txt"
cat "$OUT/probe.txt"
