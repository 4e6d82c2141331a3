#!/usr/bin/env bash
# Call 3: the pipelined absorbed-MLA kernel (the planner's {overlap}: tile j's S and softmax under tile
# j - 1's P V, K's slot a key tile behind for the view's GEMM) against its parent (5c0fdff: no overlap) in
# one process (--also parent=...), after its GPU tests.
#   bash bench/results/2026-11-30-h200-mla-decode/run3.sh   (out/carry, out/gpu-py, out/parent carried:
#   out/parent = 5c0fdff's device/ and stripped qattn)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
timeout 200 python3 -m pytest -q tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla.txt" 2>&1; echo "mla pytest rc $?" >> "$OUT/status.txt"
tail -3 "$OUT/pytest_mla.txt"
timeout 300 python3 bench/bench_mla_decode.py "$OUT/results.csv" --rounds 9 --also parent=out/parent/device:out/parent/qattn > "$OUT/bench.txt" 2>&1; echo "bench rc $?" >> "$OUT/status.txt"
grep -v Warning "$OUT/bench.txt" | grep -v "return F.scaled" | grep -v "not run" | tail -45
cat "$OUT/status.txt"
