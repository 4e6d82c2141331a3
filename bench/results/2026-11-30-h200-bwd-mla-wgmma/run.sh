#!/usr/bin/env bash
# MLA 192/128 and d192 backward on wgmma (the natural form, 64-byte-swizzled tiles for the halves of
# 192 columns) against the mma.sync natural form, same process: build (scripts/build.sh, the TL of
# scripts/make_tl.sh), numerics of every library (fixed + random shapes, a planted bug), TFLOPS
# against cuDNN / FA2; through the package (the planner's TL): pytest's MLA autograd cases and
# bench_backward.py's mla-prefill rows. Carried: out/carry, out/gpu-py, out/mlaw/tl.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-mla-wgmma
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
source tests/gpu/device_env.sh  # CUTLASS extracted, the package on the carried compiler
J=$(python3 bench/bench_backward.py --jobs --configs mla-prefill --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do python3 bench/bench_backward.py --warm $i --configs mla-prefill --no-variants > "$OUT/warm_$i.txt" 2>&1 & done
( timeout 400 python3 -m pytest -q tests/python/test_gpu_training.py -k "backward_matches and (shape7 or shape8)" -rs > "$OUT/pytest_mla.txt" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest_mla.txt" ) &
bash $D/scripts/build.sh > "$OUT/build.txt" 2>&1; cat "$OUT/build.txt"
L=out/mlaw
timeout 200 python3 tests/gpu/bwd_check.py $L/[wm]_*.so --planted $L/neg_mla_noscale.so --random 8 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"
grep -E "numerics|FAIL|planted|exit" "$OUT/bwd_check.txt" | tail -20
timeout 150 python3 tests/gpu/bwd_check.py $L/[wm]_mla_causal.so $L/[wm]_mla_none.so $L/[wm]_d192_causal.so $L/[wm]_d192_none.so --bench \
  --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' \
  --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"
grep -E "TFLOPS|exit" "$OUT/bench.txt"
wait
tail -n1 "$OUT"/warm_*.txt; tail -3 "$OUT/pytest_mla.txt"
timeout 120 python3 bench/bench_backward.py "$OUT/results_pkg.csv" --configs mla-prefill --no-variants --seqlens 2048,4096,8192 > "$OUT/bench_pkg.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_pkg.txt"; grep -v "^warm" "$OUT/bench_pkg.txt" | tail -12
