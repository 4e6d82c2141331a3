#!/usr/bin/env bash
# Third call: the planner's MLA backward (BN = 128 on wgmma) with every mask and variant: numerics on
# fixed + random shapes, the deterministic one bit-identical over 10 runs, a planted bug; through the
# package: pytest's MLA / d192 autograd cases and bench_backward.py's mla-prefill rows.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-mla-wgmma
source tests/gpu/device_env.sh  # CUTLASS extracted, the package on the carried compiler
J=$(python3 bench/bench_backward.py --jobs --configs mla-prefill --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do python3 bench/bench_backward.py --warm $i --configs mla-prefill --no-variants > "$OUT/warm3_$i.log" 2>&1 & done
( timeout 400 python3 -m pytest -q tests/python/test_gpu_training.py -k "backward_matches and (shape7 or shape8)" -rs > "$OUT/pytest3.txt" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest3.txt" ) &
bash $D/scripts/build3.sh > "$OUT/build3.txt" 2>&1; cat "$OUT/build3.txt"
L=out/mlaw3
timeout 200 python3 tests/gpu/bwd_check.py $L/mla_*.so --planted $L/neg_mla128_noscale.so --random 10 --repeat 10 > "$OUT/bwd_check3.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check3.txt"
grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check3.txt" | tail -16
wait
tail -3 "$OUT/pytest3.txt"
timeout 150 python3 bench/bench_backward.py "$OUT/results3_pkg.csv" --configs mla-prefill --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench3_pkg.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench3_pkg.txt"; grep -E "^mla|exit" "$OUT/bench3_pkg.txt"
