#!/usr/bin/env bash
# Call E: the document variant's kernels alone (torch.profiler device times, bench_variant_kernels.py):
# this tree (next_visible: the next tile alone, then four clauses a round), `batch` (the same with four
# clauses a round from the first tile: out/batch4/device) and the parent commit (out/parent).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
timeout 500 python3 bench/bench_variant_kernels.py "$OUT/kernels.csv" --variants document --rounds 7 --reps 5 \
  --also batch=out/batch4/device --also parent=out/parent/device:out/parent/qattn > "$OUT/kernels.txt" 2>&1
echo "exit $?" >> "$OUT/kernels.txt"
grep -v "Warning\|return F" "$OUT/kernels.txt" | tail -30
