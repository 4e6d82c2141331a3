#!/usr/bin/env bash
# Issue 19: the Hopper backward with dK's wgmma group carried into the next iteration (make_carry.py)
# against the planner's kernel as this tree translates it (par_), same TL, kernel to kernel in one
# process. Builds on the device (out/gpu-py's qattn / qattn_translate, CUTLASS from out/carry):
# each config's backward TL, its CUDA, the variant, both through tests/gpu/build_bwd_kernels.sh --cu;
# numerics of the variants (fixed + random shapes, FlashAttention's rule); then the A/B timing.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
HERE=bench/results/2026-11-30-h200-bwd-dk-carry; W=/tmp/carry; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
ARGS=()
for c in "d128_causal|--preset llama3-8b" "d128_none|--preset llama3-8b --mask none" "d64_causal|--preset llama3.2-1b" \
         "d128_none_mha|--preset llama2-7b --mask none" "d128_causal_mha|--preset llama2-7b"; do
  n=${c%%|*}; f=${c#*|}
  # shellcheck disable=SC2086
  $QATTN_BIN plan $f --backward --gpu h100 --out $W/$n > /dev/null || { echo "plan $n failed"; exit 1; }
  out/gpu-py/qattn_translate $W/$n/code.tl --gpu h100 -o $W/par_$n.cu || exit 1
  python3 $HERE/make_carry.py $W/par_$n.cu $W/new_$n.cu || exit 1
  out/gpu-py/qattn_translate $W/$n/code.tl --gpu h100 --flags > $W/par_$n.flags && cp $W/par_$n.flags $W/new_$n.flags
  ARGS+=(--cu "par_$n=$W/par_$n.cu" --cu "new_$n=$W/new_$n.cu")
done
L=$W/lib
bash tests/gpu/build_bwd_kernels.sh $L --bin out/gpu-py --only '^$' -j 12 "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"
grep -E "registers|spill|fail|exit" "$OUT/build.txt" | head -30
timeout 150 python3 tests/gpu/bwd_check.py $L/new_*.so --random 6 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "^numerics|exit" "$OUT/bwd_check.txt" | tail -8
timeout 120 python3 tests/gpu/bwd_check.py $L/{par,new}_d128_causal.so $L/{par,new}_d128_none.so --bench --shapes '1,4,4,300,300' \
  --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' --csv "$OUT/kernels_gqa.csv" > "$OUT/bench_gqa.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_gqa.txt"; grep -E "TFLOPS|exit" "$OUT/bench_gqa.txt"
timeout 120 python3 tests/gpu/bwd_check.py $L/{par,new}_d128_none_mha.so $L/{par,new}_d128_causal_mha.so $L/{par,new}_d64_causal.so --bench \
  --shapes '1,4,4,300,300' --bench-shapes '8,32,32,2048,2048;1,32,32,16384,16384;4,32,8,4096,4096' --csv "$OUT/kernels_other.csv" \
  > "$OUT/bench_other.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_other.txt"; grep -E "TFLOPS|exit" "$OUT/bench_other.txt"
