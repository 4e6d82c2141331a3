#!/usr/bin/env bash
# Call F (segment ids checked once per tensor version): the document tests through the package, then
# forward / backward / forward + backward with documents against the parent and FlexAttention.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
( timeout 240 python3 bench/bench_backward.py --configs '' --variants document --warm 0 > "$OUT/warm_0.txt" 2>&1 ) &
timeout 300 python3 -m pytest -q tests/python/test_gpu_training.py tests/python/test_gpu.py tests/python/test_integrations.py \
  -k "documents_with_long_runs or alibi_relative_bias_document or checked_once_per_version or auxiliary_inputs_are_checked or resolved_once" \
  -rs > "$OUT/pytest_ids.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_ids.txt"
wait
tail -4 "$OUT/pytest_ids.txt"
for r in 1 2; do
  timeout 200 python3 bench/bench_backward.py "$OUT/results_ids_$r.csv" --configs '' --variants document \
    --also parent=out/parent/device:out/parent/qattn > "$OUT/bench_ids_$r.txt" 2>&1
  echo "bench exit $?" >> "$OUT/bench_ids_$r.txt"
  grep -v "Warning\|return F\|_warn" "$OUT/bench_ids_$r.txt" | tail -3
done
