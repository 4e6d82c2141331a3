#!/usr/bin/env bash
# One device call (carried out/carry, out/loop2 from make2.sh; this tree's device/): the landed
# change against its parent, kernel to kernel (bench/bench_bwd_ab.py, the parent first) on every
# backward form (MHA / GQA d128 causal and not, d64, d256, MLA, softcap, window, documents,
# deterministic, the sm80 form on this GPU), then this tree's kernels against the fp32 reference
# (tests/gpu/bwd_check.py: fixed, random and planted shapes).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
CFG="c128 n128 gqa128 ngqa128 c64 gqa64 c256 mla soft128 win128 doc128 det128 a100_c128"
A=()
for c in $CFG; do for v in p n; do A+=(--cu "${c}_$v=out/loop2/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/loop2lib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "fail|exit|spill stores" "$OUT/build.txt" | grep -v " 0 bytes spill"
MHA='8,32,32,2048,2048;4,32,32,4096,4096;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192;1,64,8,16384,16384'
H16='8,16,16,2048,2048;4,16,16,4096,4096;1,16,16,16384,16384'
for c in $CFG; do
  case $c in *gqa*|det128) S=$GQA ;; c256|mla) S=$H16 ;; a100_*) S='4,32,32,4096,4096' ;; *) S=$MHA ;; esac
  timeout 120 python3 bench/bench_bwd_ab.py out/loop2lib/${c}_p.so out/loop2lib/${c}_n.so --shapes "$S" --rounds 9 \
    --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
L=(); for c in $CFG; do L+=(out/loop2lib/${c}_n.so); done
timeout 200 python3 tests/gpu/bwd_check.py "${L[@]}" --random 16 > "$OUT/check.txt" 2>&1
echo "check exit $? at $SECONDS s"; tail -3 "$OUT/check.txt"
