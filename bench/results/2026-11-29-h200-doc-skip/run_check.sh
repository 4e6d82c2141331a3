#!/usr/bin/env bash
# Call A: correctness of the batched {skip} walk through the package (this tree), and the d256 TL
# variants of ../2026-11-29-h200-bwd-sm80 (libraries in out/s80d2, built on the CPU machine).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
timeout 300 python3 -m pytest -q -x tests/python/test_gpu_training.py tests/python/test_gpu.py \
  -k "documents_with_long_runs or alibi_relative_bias_document" -rs > "$OUT/pytest_docs.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_docs.txt"
tail -5 "$OUT/pytest_docs.txt"
timeout 200 python3 tests/gpu/bwd_check.py out/s80d2/*.so --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;4,32,8,4096,4096' --csv "$OUT/results_d256.csv" > "$OUT/bwd_check_d256.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check_d256.txt"
grep -E "TFLOPS|numerics|exit" "$OUT/bwd_check_d256.txt"
