#!/usr/bin/env bash
# Third device call (carried out/carry, out/gpu-py, out/ord2 from `make.sh ord2 PARENT_QATTN`): the landed planner's
# programs (n_: heads first) against the parent's (p_: bbed48c's `qattn plan`, key tiles first), both
# translated by this tree, kernel to kernel (bench/bench_bwd_ab.py, rotating CUDA-graph rounds):
# causal MHA d128, d128 with softcap 30, d64, d256, MLA 192/128.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=()
for c in c128 soft128 c64 c256 mla; do for v in p n; do A+=(--cu "${c}_$v=out/ord2/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/ord2lib --only '^$' -j 10 "${A[@]}" > "$OUT/build3.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build3.txt"; grep -E "fail|exit" "$OUT/build3.txt"
MHA='16,32,32,1024,1024;8,32,32,2048,2048;4,32,32,4096,4096;2,32,32,8192,8192;1,32,32,16384,16384'
H16='16,16,16,1024,1024;8,16,16,2048,2048;4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384'
for c in c128 soft128 c64 c256 mla; do
  case $c in c256|mla) S=$H16 ;; *) S=$MHA ;; esac
  timeout 100 python3 bench/bench_bwd_ab.py out/ord2lib/${c}_p.so out/ord2lib/${c}_n.so --shapes "$S" --csv "$OUT/ab3_$c.csv" >> "$OUT/ab3.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab3.txt"
done
cat "$OUT/ab3.txt"
