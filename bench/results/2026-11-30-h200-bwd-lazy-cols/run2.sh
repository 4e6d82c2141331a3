#!/usr/bin/env bash
# Second call: the planner's TL with `{at_use}` (src/plan/backward.cc: LSE and D at d64 on Hopper),
# translated by this tree: every variant's numerics (fixed + random shapes), a planted bug (D scaled
# by 2), the deterministic library bit-identical over 10 runs, TFLOPS against the same TL without
# `{at_use}` (base_*, the parent's); through the package: pytest's d64 autograd cases and
# bench_backward.py's mha-d64 rows.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-lazy-cols
source tests/gpu/device_env.sh  # CUTLASS extracted, the package on the carried compiler
J=$(python3 bench/bench_backward.py --jobs --configs mha-d64 --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do python3 bench/bench_backward.py --warm $i --configs mha-d64 --no-variants > "$OUT/warm_$i.log" 2>&1 & done
( timeout 300 python3 -m pytest -q tests/python/test_gpu_training.py -k "backward_matches and (shape0 or shape1 or shape4)" -rs > "$OUT/pytest2.txt" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest2.txt" ) &
bash $D/scripts/build2.sh > "$OUT/build2.txt" 2>&1; cat "$OUT/build2.txt"
L=out/lazy2
timeout 150 python3 tests/gpu/bwd_check.py $L/at_*.so --planted $L/neg_d_scale.so --random 8 --repeat 10 > "$OUT/bwd_check2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check2.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check2.txt" | tail -14
timeout 120 python3 tests/gpu/bwd_check.py $L/base_causal.so $L/at_causal.so $L/base_none.so $L/at_none.so --bench --shapes '1,4,4,300,300' \
  --bench-shapes '4,32,32,4096,4096;2,32,32,8192,8192;1,32,32,16384,16384' --csv "$OUT/kernels2.csv" > "$OUT/bench2.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench2.txt"; grep -E "TFLOPS|exit" "$OUT/bench2.txt"
wait
tail -3 "$OUT/pytest2.txt"
timeout 100 python3 bench/bench_backward.py "$OUT/results_pkg.csv" --configs mha-d64 --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench_pkg.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_pkg.txt"; grep -E "^mha|exit" "$OUT/bench_pkg.txt"
