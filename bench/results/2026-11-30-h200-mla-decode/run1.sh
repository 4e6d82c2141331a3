#!/usr/bin/env bash
# Call 1 (issue 20, absorbed MLA decoding): the GPU tests of the new kernel (tests/python/test_mla_decode.py),
# the KV-cache tests the packed maps' change touches (GQA packing, paged caches), then the benchmark.
#   bash bench/results/2026-11-30-h200-mla-decode/run1.sh   (out/carry, out/gpu-py carried)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
timeout 200 python3 -m pytest -q -x tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla.txt" 2>&1; echo "mla pytest rc $?" >> "$OUT/status.txt"
tail -5 "$OUT/pytest_mla.txt"
timeout 150 python3 bench/bench_mla_decode.py "$OUT/results.csv" --rounds 7 > "$OUT/bench.txt" 2>&1; echo "bench rc $?" >> "$OUT/status.txt"
cat "$OUT/bench.txt" | tail -40
timeout 200 python3 -m pytest -q -x tests/python/test_kvcache.py -k "pack or paged or graph" -rs > "$OUT/pytest_kvcache.txt" 2>&1; echo "kvcache pytest rc $?" >> "$OUT/status.txt"
tail -3 "$OUT/pytest_kvcache.txt"
cat "$OUT/status.txt"
