#!/usr/bin/env bash
# The rules engine's backward TL with softmax_scale folded into dS (dP * scale - D * scale) and the masks
# on P (S * c - LSE then the masks): every default config of tests/gpu/build_bwd_kernels.sh plus d192,
# translated by this tree (out/gpu-py): numerics, the planted bugs (one new: dP left unscaled), the
# deterministic kernels bit-identical over 10 runs; kernel-to-kernel TFLOPS against the parent's program
# (out/sfab: scripts/make_ab.sh) in one process; then issue 19's backward table through the package.
# Carried: out/carry, out/gpu-py, out/sfab. It ran with planner.patch applied (out/gpu-py built from that
# tree: the default configs' numerics and the package table are the patched planner's); the patch did
# not land (README.md).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
J=$(python3 bench/bench_backward.py --jobs --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do timeout 300 python3 bench/bench_backward.py --warm $i --no-variants > "$OUT/warm_$i.log" 2>&1 & done
L=out/sfab/lib; ARGS=()
for f in out/sfab/new_*.cu out/sfab/par_*.cu; do n=$(basename "$f" .cu); ARGS+=(--cu "$n=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/sfall --bin out/gpu-py --extra "bwd_d192_causal|--preset llama3-8b --head-dim 192" \
  --extra "bwd_softcap_d256|--preset gemma2-9b" > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait
cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "fail|exit|softcap|d128_causal"
timeout 200 python3 tests/gpu/bwd_check.py $(ls out/sfall/bwd_*.so) --planted $(ls out/sfall/neg_*.so) --random 6 --repeat 10 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "^numerics|caught|NOT|deterministic;|exit" "$OUT/bwd_check.txt" | tail -8
timeout 150 python3 tests/gpu/bwd_check.py $L/{par,new}_d128_causal.so $L/{par,new}_d128_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels_d128.csv" > "$OUT/bench_d128.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_d128.txt"; grep -E "TFLOPS|exit" "$OUT/bench_d128.txt"
timeout 200 python3 tests/gpu/bwd_check.py $L/{par,new}_d64_causal.so $L/{par,new}_d64_none_mha.so $L/{par,new}_d256_causal.so \
  $L/{par,new}_mla_causal.so $L/{par,new}_mla_none.so $L/{par,new}_d192_causal.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;1,16,16,16384,16384' \
  --csv "$OUT/kernels_other.csv" > "$OUT/bench_other.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_other.txt"; grep -E "TFLOPS|exit" "$OUT/bench_other.txt"
grep -h "built" "$OUT"/warm_*.log | wc -l
timeout 250 python3 bench/bench_backward.py "$OUT/results.csv" --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "causal=|exit" "$OUT/bench.txt"
rm -f "$OUT"/warm_*.log
