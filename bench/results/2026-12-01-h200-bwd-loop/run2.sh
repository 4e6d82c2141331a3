#!/usr/bin/env bash
# One device call (carried out/carry, out/loop from make.sh): the d128 loop's variants (make_var.py)
# kernel to kernel against the generated unit (bench/bench_bwd_ab.py, base first), the `all`
# variants checked against the fp32 reference (tests/gpu/bwd_check.py), and the SASS store / load
# forms of base, pairs and lds2.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
V="base lsel arrive stage2 pairs lds2 all b_nodq b_nowait"
A=()
for c in c128 n128 gqa128; do for v in $V; do A+=(--cu "${c}_$v=out/loop/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/looplib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt" | grep -v " 0 bytes spill" 
for v in base pairs lds2; do
  echo "$v: $(cuobjdump -sass out/looplib/n128_$v.so | grep -oE '\b(STS|LDS|STSM)(\.[A-Z0-9]+)*' | sort | uniq -c | tr '\n' ' ')"
done
MHA='4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192'
for c in n128 c128 gqa128; do
  case $c in gqa128) S=$GQA ;; *) S=$MHA ;; esac
  L=(); for v in $V; do L+=(out/looplib/${c}_$v.so); done
  timeout 150 python3 bench/bench_bwd_ab.py "${L[@]}" --shapes "$S" --rounds 7 --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
timeout 120 python3 tests/gpu/bwd_check.py out/looplib/n128_all.so out/looplib/c128_all.so out/looplib/gqa128_all.so --random 20 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -5 "$OUT/check.txt"
