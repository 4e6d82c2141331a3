#!/usr/bin/env bash
# Call D (next_visible checking the next tile alone before the batched walk): the document tests
# through the package, then the document A/B against the parent commit and FlexAttention.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
( timeout 240 python3 bench/bench_backward.py --configs '' --variants document --warm 0 > "$OUT/warm_0.txt" 2>&1 ) &
timeout 300 python3 -m pytest -q -x tests/python/test_gpu_training.py tests/python/test_gpu.py \
  -k "documents_with_long_runs or alibi_relative_bias_document" -rs > "$OUT/pytest_docs.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_docs.txt"
wait
tail -3 "$OUT/pytest_docs.txt"
for r in 1 2; do
  timeout 200 python3 bench/bench_backward.py "$OUT/results_doc_$r.csv" --configs '' --variants document \
    --also parent=out/parent/device:out/parent/qattn > "$OUT/bench_doc_$r.txt" 2>&1
  echo "bench exit $?" >> "$OUT/bench_doc_$r.txt"
  grep -v "Warning\|return F" "$OUT/bench_doc_$r.txt" | tail -4
done
