#!/usr/bin/env bash
# Run in the next session (section 7 of the README; it had been prepared when the device time ran out): one device call (carried out/carry, out/loop4 from
# make4.sh; this tree's device/ with xor2.patch applied: stage_acc's XOR2):
# the dQ stage without bank conflicts against this tree's units, kernel to kernel, and its numerics.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=(); for f in out/loop4/*.cu; do n=$(basename "$f" .cu); A+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/loop4lib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt" | grep -v " 0 bytes spill"
MHA='8,32,32,2048,2048;4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192;1,64,8,16384,16384'
for c in n128 c128 gqa128 ngqa128 c64 gqa64; do
  case $c in *gqa*) S=$GQA ;; *) S=$MHA ;; esac
  timeout 60 python3 bench/bench_bwd_ab.py out/loop4lib/${c}_n.so out/loop4lib/${c}_x.so --shapes "$S" --rounds 9 >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
timeout 60 python3 tests/gpu/bwd_check.py out/loop4lib/c128_x.so out/loop4lib/ngqa128_x.so out/loop4lib/c64_x.so --random 16 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -2 "$OUT/check.txt"
