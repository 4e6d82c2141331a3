#!/usr/bin/env bash
# Ninth device call (carried out/carry, out/pred from make5.sh): the dQ stage's stores issued twice under
# the row's parity (pred2.patch: var/) against this tree's units (base/: XOR2 at d64, the plain order at
# d128), kernel to kernel, and the variant's numerics.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=(); for f in out/pred/base/*.cu out/pred/var/*.cu; do A+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/predlib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt"
MHA='8,32,32,2048,2048;4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192;1,64,8,16384,16384'
for c in n128 c128 gqa128 ngqa128 c64 gqa64; do
  case $c in *gqa*) S=$GQA ;; *) S=$MHA ;; esac
  timeout 60 python3 bench/bench_bwd_ab.py out/predlib/${c}_b.so out/predlib/${c}_v.so --shapes "$S" --rounds 9 >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
timeout 60 python3 tests/gpu/bwd_check.py out/predlib/c128_v.so out/predlib/ngqa128_v.so out/predlib/c64_v.so --random 16 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -2 "$OUT/check.txt"
