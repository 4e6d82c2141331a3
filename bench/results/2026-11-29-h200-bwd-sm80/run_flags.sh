#!/usr/bin/env bash
# The same generated CUDA compiled from compute_80 PTX (the package's flags for the mma.sync family on
# Hopper) and from compute_90 PTX, both to sm_90 SASS (out/s80fl, built on the CPU machine by
# build_flags.sh), timed in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
timeout 200 python3 tests/gpu/bwd_check.py out/s80fl/*.so --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;4,32,8,4096,4096' --csv "$OUT/results_flags.csv" > "$OUT/bwd_check_flags.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check_flags.txt"
grep -E "TFLOPS|numerics|exit" "$OUT/bwd_check_flags.txt"
# what differs in the SASS: opcode counts of the main kernel (the largest function) per build
for so in out/s80fl/d256_h_c80.so out/s80fl/d256_h_c90.so; do
  cuobjdump -sass "$so" | awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\/ +[A-Z@]/ {op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); n[f" "op]++} END {for (k in n) print n[k], k}' \
    | sort -k2,2 -k1,1nr > "$OUT/sass_ops_$(basename "$so" .so).txt"
done
head -3 "$OUT"/sass_ops_*.txt
