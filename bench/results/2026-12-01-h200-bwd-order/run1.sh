#!/usr/bin/env bash
# One device call (carried out/carry, out/gpu-py, out/ord from `make.sh ord`): the backward's key-tile
# order, kernel to kernel (bench/bench_bwd_ab.py: the generated unit `base` first, then `hfirst` and
# `grp8` from make_order.py), causal d128 MHA / GQA, d64, d256, MLA and no mask d128.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=()
for c in c128 n128 gqa128 c64 c256 mla; do for v in base hfirst grp8; do A+=(--cu "${c}_$v=out/ord/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/ordlib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "registers|fail|exit" "$OUT/build.txt"
MHA='8,32,32,2048,2048;4,32,32,4096,4096;2,32,32,8192,8192;1,32,32,16384,16384'
H16='8,16,16,2048,2048;4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192;8,64,8,2048,2048;1,64,8,16384,16384'
for c in c128 n128 gqa128 c64 c256 mla; do
  case $c in gqa128) S=$GQA ;; c256|mla) S=$H16 ;; *) S=$MHA ;; esac
  timeout 120 python3 bench/bench_bwd_ab.py out/ordlib/${c}_base.so out/ordlib/${c}_hfirst.so out/ordlib/${c}_grp8.so --shapes "$S" \
    --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1; echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
