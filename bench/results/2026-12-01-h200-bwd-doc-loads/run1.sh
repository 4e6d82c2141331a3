#!/usr/bin/env bash
# One device call (carried out/carry, out/docl from make.sh): the document-mask kernels' clause reads
# moved to the top of the iteration, kernel to kernel against this tree's translation (_p first):
# backward (bench/bench_bwd_ab.py; MHA and GQA), forward (fwd_doc_ab.py), then the numerics of the
# variants (tests/gpu/bwd_check.py: fixed and random documents; fwd_doc_ab.py's fp32 check).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-12-01-h200-bwd-doc-loads
A=(); for u in doc_p doc_f doc_h doc_h16 gdoc_p gdoc_h fdoc_p fdoc_h; do A+=(--cu "$u=out/docl/$u.cu"); done
bash tests/gpu/build_bwd_kernels.sh out/docllib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
L=out/docllib
timeout 150 python3 bench/bench_bwd_ab.py $L/doc_p.so $L/doc_f.so $L/doc_h.so $L/doc_h16.so \
  --shapes '4,32,32,4096,4096;2,32,32,8192,8192;8,32,32,2048,2048' --rounds 9 --csv "$OUT/ab_doc.csv" > "$OUT/ab.txt" 2>&1
echo "doc exit $? at $SECONDS s" >> "$OUT/ab.txt"
timeout 100 python3 bench/bench_bwd_ab.py $L/gdoc_p.so $L/gdoc_h.so \
  --shapes '4,32,8,4096,4096;2,32,8,8192,8192' --rounds 9 --csv "$OUT/ab_gdoc.csv" >> "$OUT/ab.txt" 2>&1
echo "gdoc exit $? at $SECONDS s" >> "$OUT/ab.txt"
cat "$OUT/ab.txt"
timeout 100 python3 $D/fwd_doc_ab.py $L/fdoc_p.so $L/fdoc_h.so --csv "$OUT/ab_fwd.csv" > "$OUT/fwd.txt" 2>&1
echo "fwd exit $? at $SECONDS s" >> "$OUT/fwd.txt"; cat "$OUT/fwd.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/doc_h.so $L/doc_h16.so $L/gdoc_h.so --random 12 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s" >> "$OUT/check.txt"; grep -E "FAIL|numerics|exit" "$OUT/check.txt"
