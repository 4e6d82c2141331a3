#!/usr/bin/env bash
# Sixth call: the lowering's float4 dQ / dK / dV additions on warpgroup MMA (add_acc_global_v4, this
# tree). Every default config of tests/gpu/build_bwd_kernels.sh translated by this tree's compiler
# (out/gpu-py) plus d192: numerics (fixed + random shapes), the planted bugs, the deterministic kernels
# bit-identical over 10 runs. Then kernel-to-kernel TFLOPS against the parent's CUDA of the same TL
# (out/v4ab: new_* as translated here, par_* the same with add_acc_global, i.e. 09a0089's output), in one
# process; d128 also with dQ laid out heads-first (--dq-heads-first).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/v4ab/lib; ARGS=()
for f in out/v4ab/new_*.cu out/v4ab/par_*.cu; do n=$(basename "$f" .cu); ARGS+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/v4all --bin out/gpu-py --extra "bwd_d192_causal|--preset llama3-8b --head-dim 192" > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "registers|fail|exit"
grep -c add_acc_global_v4 out/v4all/bwd_d128_causal.cu
timeout 200 python3 tests/gpu/bwd_check.py $(ls out/v4all/bwd_*.so) --planted $(ls out/v4all/neg_*.so) --random 6 --repeat 10 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -12
timeout 150 python3 tests/gpu/bwd_check.py $L/{par,new}_d128_causal.so $L/{par,new}_d128_none.so --dq-heads-first \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels_d128.csv" > "$OUT/bench_d128.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_d128.txt"; grep -E "TFLOPS|exit" "$OUT/bench_d128.txt"
timeout 200 python3 tests/gpu/bwd_check.py $L/{par,new}_d64_causal.so $L/{par,new}_d64_none_mha.so $L/{par,new}_d256_causal.so \
  $L/{par,new}_mla_causal.so $L/{par,new}_mla_none.so $L/{par,new}_d192_causal.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;1,16,16,16384,16384' \
  --csv "$OUT/kernels_other.csv" > "$OUT/bench_other.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_other.txt"; grep -E "TFLOPS|exit" "$OUT/bench_other.txt"
