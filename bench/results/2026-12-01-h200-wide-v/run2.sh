#!/usr/bin/env bash
# Third device call (carried: out/carry, out/gpu-py, .whl): head_dim_v > head_dim_qk through the serving
# entry points: attention_varlen on ragged batches, attention_with_kvcache over contiguous and paged caches
# (decoding with its key split and combine, and a causal chunk), against fp64 per sequence.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
source tests/gpu/pytest_env.sh
timeout 400 python3 -m pytest -q -rs tests/python/test_varlen.py tests/python/test_kvcache.py -k "wider" > "$OUT/pytest_serving.txt" 2>&1
echo "pytest exit $? at $SECONDS s"; tail -15 "$OUT/pytest_serving.txt"
