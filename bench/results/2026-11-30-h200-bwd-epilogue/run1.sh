#!/usr/bin/env bash
# One device call: dK / dV staged in the loop's buffers and written by TMA (this tree: new_) against
# main before it (par_), kernel to kernel (bench/bench_bwd_ab.py), after the numerics of every default
# config of tests/gpu/build_bwd_kernels.sh translated by this tree (out/gpu-py) and of the new_ units.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/eplib; ARGS=()
for f in out/ep/*_*.cu; do ARGS+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 > "$OUT/build.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_ab.txt" >> "$OUT/build.txt"; rm "$OUT/build_ab.txt"; grep -E "fail|exit" "$OUT/build.txt"
timeout 150 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) $L/new_*.so --planted $(ls out/all/neg_*.so) --random 3 --repeat 5 \
  > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|exit" "$OUT/bwd_check.txt" | tail -8
S='8,32,8,2048,2048;2,32,8,8192,8192;16,32,32,1024,1024;8,32,32,2048,2048;2,32,32,8192,8192'
: > "$OUT/ab.txt"
for n in d128_causal d128_none d128_causal_mha d128_none_mha d64_causal d64_none_mha d128_window_mha d128_doc d256_causal_mha mla_causal; do
  timeout 60 python3 bench/bench_bwd_ab.py $L/par_$n.so $L/new_$n.so --shapes "$S" --csv "$OUT/ab_one.csv" >> "$OUT/ab.txt" 2>&1
  echo "ab $n exit $?" >> "$OUT/ab.txt"
  if [ -f "$OUT/ab.csv" ]; then tail -n +2 "$OUT/ab_one.csv" >> "$OUT/ab.csv"; else cp "$OUT/ab_one.csv" "$OUT/ab.csv"; fi
done
rm -f "$OUT/ab_one.csv"; grep -v "^NVIDIA\|skipped" "$OUT/ab.txt"
