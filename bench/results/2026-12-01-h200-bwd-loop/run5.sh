#!/usr/bin/env bash
# One device call (carried out/carry, out/loop3 from make3.sh; this tree's device/ with
# store_acc_smem_stsm): this tree's units against make_var2.py's variants (dS^T by stmatrix, D's
# columns read earlier), kernel to kernel, then the stmatrix ones against the fp32 reference.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=(); for f in out/loop3/*.cu; do n=$(basename "$f" .cu); A+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/loop3lib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt" | grep -v " 0 bytes spill"
echo "n: $(cuobjdump -sass out/loop3lib/c128_n.so | grep -oE '\b(STS|STSM)(\.[A-Z0-9]+)*' | sort | uniq -c | tr '\n' ' ')"
echo "stsm: $(cuobjdump -sass out/loop3lib/c128_stsm.so | grep -oE '\b(STS|STSM)(\.[A-Z0-9]+)*' | sort | uniq -c | tr '\n' ' ')"
MHA='8,32,32,2048,2048;4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192'
for c in n128 c128 gqa128 c64; do
  case $c in gqa128) S=$GQA ;; *) S=$MHA ;; esac
  L=(); for v in n stsm dtop dexp stsm_dexp; do [ -f out/loop3lib/${c}_$v.so ] && L+=(out/loop3lib/${c}_$v.so); done
  timeout 120 python3 bench/bench_bwd_ab.py "${L[@]}" --shapes "$S" --rounds 9 >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
timeout 100 python3 tests/gpu/bwd_check.py out/loop3lib/c128_stsm.so out/loop3lib/n128_stsm_dexp.so out/loop3lib/gqa128_stsm.so out/loop3lib/c64_stsm.so --random 16 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -2 "$OUT/check.txt"
