#!/usr/bin/env bash
# One device call (carried out/carry, out/docl6 from make6.sh): the landed lowering and planner change
# against the parent, kernel to kernel, on every backward with a `{skip}` loop (bench/bench_bwd_ab.py,
# the parent first), then this tree's units against the fp32 reference (tests/gpu/bwd_check.py: fixed
# and random shapes, random documents) with the planted document bug, which must fail.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
CFG="doc gdoc doc64n plm docfp16 a100doc"
A=(--cu "neg_doc_clause=out/docl6/neg_doc_clause.cu")
for c in $CFG; do for v in p n; do A+=(--cu "${c}_$v=out/docl6/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/docl6lib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|registers" "$OUT/build.txt"
MHA='4,32,32,4096,4096;2,32,32,8192,8192;8,32,32,2048,2048'
for c in $CFG; do
  case $c in gdoc) S='4,32,8,4096,4096;2,32,8,8192,8192' ;; doc64n) S='4,16,16,4096,4096;2,16,16,8192,8192' ;;
             plm|a100doc) S='4,32,32,4096,4096;8,32,32,2048,2048' ;; *) S=$MHA ;; esac
  timeout 100 python3 bench/bench_bwd_ab.py out/docl6lib/${c}_p.so out/docl6lib/${c}_n.so --shapes "$S" --rounds 9 \
    --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
L=(); for c in $CFG; do L+=(out/docl6lib/${c}_n.so); done
timeout 240 python3 tests/gpu/bwd_check.py "${L[@]}" --random 12 --planted out/docl6lib/neg_doc_clause.so > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s" >> "$OUT/check.txt"; grep -E "FAIL|numerics|planted|exit" "$OUT/check.txt" | tail -12
