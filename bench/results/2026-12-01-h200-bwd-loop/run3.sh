#!/usr/bin/env bash
# One device call (carried out/carry, out/loop from make.sh; this tree's device/ with the narrow dQ
# stage, tma_stage_offset_narrow): the variants of make_var.py (arrive, pairs, narrow and their
# combinations) kernel to kernel against the generated unit (bench/bench_bwd_ab.py, base first),
# the combined ones checked against the fp32 reference (tests/gpu/bwd_check.py), the SASS store /
# load forms of base and anpl, and Nsight Compute of n128_anpl (the shape of run1.sh's ncu).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
V="base arrive pairs narrow an ap anp anpl stage2"
A=()
for c in c128 n128 gqa128; do for v in $V; do A+=(--cu "${c}_$v=out/loop/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/looplib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt" | grep -v " 0 bytes spill" 
for v in base anpl; do
  echo "$v: $(cuobjdump -sass out/looplib/n128_$v.so | grep -oE '\b(STS|LDS|STSM)(\.[A-Z0-9]+)*' | sort | uniq -c | tr '\n' ' ')"
done
MHA='4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192'
for c in n128 c128 gqa128; do
  case $c in gqa128) S=$GQA ;; *) S=$MHA ;; esac
  L=(); for v in $V; do L+=(out/looplib/${c}_$v.so); done
  timeout 150 python3 bench/bench_bwd_ab.py "${L[@]}" --shapes "$S" --rounds 9 --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
timeout 120 python3 tests/gpu/bwd_check.py out/looplib/n128_anpl.so out/looplib/c128_anpl.so out/looplib/gqa128_anp.so out/looplib/n128_narrow.so --random 20 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -5 "$OUT/check.txt"
timeout 150 ncu --clock-control none -k 'regex:_sm90$' --launch-skip 2 --launch-count 1 --set full --import-source yes -o "$OUT/ncu_anpl" \
  python3 tests/gpu/bwd_check.py out/looplib/n128_anpl.so --shapes '1,2,2,77,130' --bench --bench-shapes '2,16,16,8192,8192' > "$OUT/ncu_log_anpl.txt" 2>&1
echo "ncu rc $? at $SECONDS s"
ncu -i "$OUT/ncu_anpl.ncu-rep" --page details > "$OUT/ncu_anpl_details.txt" 2>&1
ncu -i "$OUT/ncu_anpl.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_anpl_sass.csv" 2>&1
rm -f "$OUT/ncu_anpl.ncu-rep"
