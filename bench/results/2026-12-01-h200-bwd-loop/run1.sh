#!/usr/bin/env bash
# One device call (carried out/carry, out/loop from make.sh): the d128 loop's bound variants and the
# LSE-late order, kernel to kernel (bench/bench_bwd_ab.py, base first), then Nsight Compute of the
# base kernel and of cuDNN's backward kernel on the same shape (no mask, b2 h16 s8192).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
A=()
for c in c128 n128 gqa128; do for v in base lsel b_nodq b_nowait b_nosync; do A+=(--cu "${c}_$v=out/loop/${c}_$v.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/looplib --only '^$' -j 16 "${A[@]}" > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"; grep -E "registers|fail|exit" "$OUT/build.txt"
MHA='4,32,32,4096,4096;2,32,32,8192,8192;1,32,32,16384,16384'
GQA='8,32,8,2048,2048;2,32,8,8192,8192'
for c in c128 n128 gqa128; do
  case $c in gqa128) S=$GQA ;; *) S=$MHA ;; esac
  L=(); for v in base lsel b_nodq b_nowait b_nosync; do L+=(out/looplib/${c}_$v.so); done
  timeout 100 python3 bench/bench_bwd_ab.py "${L[@]}" --shapes "$S" --csv "$OUT/ab_$c.csv" >> "$OUT/ab.txt" 2>&1
  echo "$c exit $? at $SECONDS s" >> "$OUT/ab.txt"
done
cat "$OUT/ab.txt"
for who in qattn cudnn; do
  case $who in qattn) K='regex:_sm90$' ;; cudnn) K='regex:flash_bprop' ;; esac
  timeout 150 ncu --clock-control none -k "$K" --launch-skip 2 --launch-count 1 --set full --import-source yes -o "$OUT/ncu_$who" \
    python3 tests/gpu/bwd_check.py out/looplib/n128_base.so --shapes '1,2,2,77,130' --bench --bench-shapes '2,16,16,8192,8192' > "$OUT/ncu_log_$who.txt" 2>&1
  echo "ncu $who rc $? at $SECONDS s"
  ncu -i "$OUT/ncu_$who.ncu-rep" --page details > "$OUT/ncu_${who}_details.txt" 2>&1
  ncu -i "$OUT/ncu_$who.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${who}_sass.csv" 2>&1
  rm -f "$OUT/ncu_$who.ncu-rep"
done
ls -la "$OUT"
