#!/usr/bin/env bash
# The backward at d96 and d160 (the planner's Hopper TL: dQ on the default layout now; before, the
# lowering refused both programs), built on the CPU machine into out/s80d4: numerics and TFLOPS.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
timeout 200 python3 tests/gpu/bwd_check.py out/s80d4/*.so --random 8 --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;4,32,8,4096,4096' > "$OUT/bwd_check_dims.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check_dims.txt"
grep -E "TFLOPS|numerics|exit|FAIL" "$OUT/bwd_check_dims.txt"
