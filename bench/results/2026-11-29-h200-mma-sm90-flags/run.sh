#!/usr/bin/env bash
# The mma.sync family compiled for Hopper from compute_90 PTX (6557dca): (1) the d256 / MLA backward
# TL variants as compute_90 builds (out/s80d3, built on the CPU machine: ../2026-11-29-h200-bwd-sm80/
# scripts/mk_d256.py on the planner's TL), (2) the combine (the split keys' second kernel, a row-wise
# kernel of the same family) through the package: pytest, and decoding rows that split against the
# parent commit's compiler (compute_80 PTX) in one process.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
timeout 150 python3 tests/gpu/bwd_check.py out/s80d3/*.so --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;4,32,8,4096,4096' --csv "$OUT/results_bwd.csv" > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"
grep -E "TFLOPS|numerics|exit" "$OUT/bwd_check.txt"
timeout 240 python3 -m pytest -q -x tests/python/test_split_keys.py tests/python/test_combine.py -rs > "$OUT/pytest_combine.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_combine.txt"
tail -3 "$OUT/pytest_combine.txt"
timeout 200 python3 bench/bench_kvcache.py "$OUT/decode.csv" --rows mqa_32_1_b32_8k,mqa_16_1_b8_16k,gqa_32_8_b1_64k,gqa_32_8_b4_16k \
  --pages 0 --rounds 9 --also parent=out/parent/device:out/parent/qattn > "$OUT/decode.txt" 2>&1
echo "bench exit $?" >> "$OUT/decode.txt"
grep -E "speed vs|exit|qattn " "$OUT/decode.txt" | tail -16
# the scripts whose helpers moved (bench_util.kernel_times, bench_runtimes.add_runtimes): one short run each
timeout 60 python3 tests/gpu/decode_profile.py --rows mqa_16_1_b8_16k --pages 0 --reps 5 > "$OUT/decode_profile.txt" 2>&1
echo "decode_profile exit $?" >> "$OUT/decode_profile.txt"
tail -4 "$OUT/decode_profile.txt"
timeout 150 python3 bench/bench_variant_kernels.py "$OUT/kernels_softcap.csv" --variants softcap --rounds 1 --reps 2 > "$OUT/kernels_softcap.txt" 2>&1
echo "bench_variant_kernels exit $?" >> "$OUT/kernels_softcap.txt"
grep -v "Warn\|_warn" "$OUT/kernels_softcap.txt" | tail -6
