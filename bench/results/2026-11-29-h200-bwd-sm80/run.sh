#!/usr/bin/env bash
# The sm80 (mma.sync / cp.async) backward against FlashAttention-2's, on the H200 (both Ampere-form
# kernels on the same GPU), and the TL variants of this folder's README: run from the repository root
# on the device machine with out/s80 (the libraries, built on the CPU machine by build.sh) carried.
set -euo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
python3 tests/gpu/bwd_check.py out/s80/s80/*.so out/s80/h/*.so --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384;4,32,8,4096,4096' \
  --csv "$OUT/results_raw.csv" 2>&1 | tee "$OUT/bwd_check.txt"
