#!/usr/bin/env bash
# The backward at d32, d160, d192, d224, d288 and d320 after the copy fix (the global -> shared copy
# takes threads per row that split every tile), built on the CPU machine into out/s80d5: numerics, TFLOPS.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
timeout 200 python3 tests/gpu/bwd_check.py out/s80d5/*.so --random 8 --bench \
  --bench-shapes '4,16,16,4096,4096' > "$OUT/bwd_check_dims2.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check_dims2.txt"
grep -E "TFLOPS|numerics|exit|FAIL" "$OUT/bwd_check_dims2.txt"
