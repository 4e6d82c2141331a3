#!/usr/bin/env bash
# Second call: (1) the two variant libraries that failed in run.sh (softcap, documents: the
# `apply_keep` of their query-rows / document masks took the mma.sync layout; fixed in the lowering),
# rebuilt, with every wgmma library on more random shapes; (2) through the package (the planner's TL,
# compiled here): pytest's d256 autograd cases, and bench_backward.py's mha-d256 rows (fwd, bwd,
# fwd+bwd against cuDNN / FA2, one process).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-d256-wgmma
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
source tests/gpu/device_env.sh  # CUTLASS extracted, the package on the carried compiler
# the package's kernels build in the background while the libraries are built and checked
J=$(python3 bench/bench_backward.py --jobs --configs mha-d256 --no-variants 2>/dev/null | tail -1)
for i in $(seq 0 $((J - 1))); do python3 bench/bench_backward.py --warm $i --configs mha-d256 --no-variants > "$OUT/warm_$i.txt" 2>&1 & done
( timeout 400 python3 -m pytest -q tests/python/test_gpu_training.py -k "backward_matches and (shape5 or shape6)" -rs > "$OUT/pytest_d256.txt" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest_d256.txt" ) &
bash $D/scripts/build.sh > "$OUT/build2.txt" 2>&1; cat "$OUT/build2.txt"
L=out/d256w
timeout 150 python3 tests/gpu/bwd_check.py $L/w_*.so --random 14 > "$OUT/bwd_check2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check2.txt"
grep -E "numerics|FAIL|exit" "$OUT/bwd_check2.txt" | tail -12
wait
tail -n1 "$OUT"/warm_*.txt
tail -3 "$OUT/pytest_d256.txt"
timeout 200 python3 bench/bench_backward.py "$OUT/results_pkg.csv" --configs mha-d256 --no-variants --seqlens 2048,4096,8192,16384 > "$OUT/bench_pkg.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_pkg.txt"; grep -v "^warm" "$OUT/bench_pkg.txt" | tail -40
