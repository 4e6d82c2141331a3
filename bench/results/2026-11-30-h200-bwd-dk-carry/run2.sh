#!/usr/bin/env bash
# Second call: dK's product with dS^T from its shared copy (wgmma SS, make_ss.py: ss_), and that with
# dK's group carried into the next iteration (ssc_; no register operand in flight across the back edge,
# which ptxas serialised in run.sh's variant), against the planner's kernel (par_), same TL, d128.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
HERE=bench/results/2026-11-30-h200-bwd-dk-carry; W=/tmp/carry2; mkdir -p $W
ARGS=()
for c in "d128_causal|--preset llama3-8b" "d128_none|--preset llama3-8b --mask none" \
         "d128_none_mha|--preset llama2-7b --mask none" "d128_causal_mha|--preset llama2-7b"; do
  n=${c%%|*}; f=${c#*|}
  # shellcheck disable=SC2086
  $QATTN_BIN plan $f --backward --gpu h100 --out $W/$n > /dev/null || { echo "plan $n failed"; exit 1; }
  out/gpu-py/qattn_translate $W/$n/code.tl --gpu h100 -o $W/par_$n.cu || exit 1
  python3 $HERE/make_ss.py $W/par_$n.cu $W/ss_$n.cu && python3 $HERE/make_ss.py $W/par_$n.cu $W/ssc_$n.cu --carry || exit 1
  out/gpu-py/qattn_translate $W/$n/code.tl --gpu h100 --flags > $W/par_$n.flags
  cp $W/par_$n.flags $W/ss_$n.flags; cp $W/par_$n.flags $W/ssc_$n.flags
  ARGS+=(--cu "par_$n=$W/par_$n.cu" --cu "ss_$n=$W/ss_$n.cu" --cu "ssc_$n=$W/ssc_$n.cu")
done
L=$W/lib
bash tests/gpu/build_bwd_kernels.sh $L --bin out/gpu-py --only '^$' -j 14 "${ARGS[@]}" > "$OUT/build2.txt" 2>&1; echo "build exit $?" >> "$OUT/build2.txt"
grep -E "registers|fail|exit" "$OUT/build2.txt" | sort | head -20
timeout 150 python3 tests/gpu/bwd_check.py $L/ss_*.so $L/ssc_*.so --random 6 > "$OUT/bwd_check2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check2.txt"; grep -E "^numerics|exit|FAIL" "$OUT/bwd_check2.txt" | tail -8
timeout 150 python3 tests/gpu/bwd_check.py $L/{par,ss,ssc}_d128_causal.so $L/{par,ss,ssc}_d128_none.so --bench --shapes '1,4,4,300,300' \
  --bench-shapes '8,32,8,2048,2048;1,32,8,16384,16384' --csv "$OUT/kernels2_gqa.csv" > "$OUT/bench2_gqa.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2_gqa.txt"; grep -E "TFLOPS|exit" "$OUT/bench2_gqa.txt"
timeout 150 python3 tests/gpu/bwd_check.py $L/{par,ss,ssc}_d128_none_mha.so $L/{par,ss,ssc}_d128_causal_mha.so --bench --shapes '1,4,4,300,300' \
  --bench-shapes '8,32,32,2048,2048;1,32,32,16384,16384' --csv "$OUT/kernels2_mha.csv" > "$OUT/bench2_mha.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2_mha.txt"; grep -E "TFLOPS|exit" "$OUT/bench2_mha.txt"
