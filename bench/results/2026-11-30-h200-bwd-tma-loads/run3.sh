#!/usr/bin/env bash
# Third call: the lowering as landed (the TMA ring + dS^T handed over on named barriers). Every default
# config of tests/gpu/build_bwd_kernels.sh plus d192 and MLA without a mask, translated by this tree
# (out/gpu-py): numerics (fixed + random shapes), the planted bugs, the deterministic kernels
# bit-identical over 10 runs. Then kernel to kernel in one process: par_ (main's qattn_translate at
# 3edaaf9) against new_ (this tree's) of the same TL (out/tma/<config>.tl).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/tmalib; ARGS=()
for f in out/tma/par_*.cu out/tma/new_*.cu; do ARGS+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 --extra "bwd_d192_causal|--preset llama3-8b --head-dim 192" \
  --extra "bwd_mla_none|--preset deepseek-v3-mla-prefill --mask none" > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "registers|fail|exit"
timeout 170 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) --planted $(ls out/all/neg_*.so) --random 6 --repeat 10 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "^numerics|caught|x10|exit" "$OUT/bwd_check.txt" | tail -22
timeout 90 python3 tests/gpu/bwd_check.py $L/{par,new}_d128_causal.so $L/{par,new}_d128_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels_d128.csv" > "$OUT/bench_d128.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_d128.txt"; grep -E "TFLOPS|exit" "$OUT/bench_d128.txt"
timeout 200 python3 tests/gpu/bwd_check.py $L/{par,new}_d64_causal.so $L/{par,new}_d64_none_mha.so $L/{par,new}_d256_causal.so \
  $L/{par,new}_mla_causal.so $L/{par,new}_mla_none.so $L/{par,new}_d128_doc.so $L/{par,new}_d128_window_mha.so \
  $L/{par,new}_fp16_d128_topleft_mha.so $L/{par,new}_d192_causal.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;1,16,16,16384,16384' \
  --csv "$OUT/kernels_other.csv" > "$OUT/bench_other.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_other.txt"; grep -E "TFLOPS|exit" "$OUT/bench_other.txt"
