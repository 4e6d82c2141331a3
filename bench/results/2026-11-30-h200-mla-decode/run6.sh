#!/usr/bin/env bash
# Call 6: qattn.flash_mla_interface (FlashMLA's signatures) in the absorbed-MLA GPU tests.
#   bash bench/results/2026-11-30-h200-mla-decode/run6.sh   (out/carry, out/gpu-py carried)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
timeout 150 python3 -m pytest -q tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla.txt" 2>&1; echo "mla pytest rc $?" >> "$OUT/status.txt"
for f in "$OUT"/pytest_*.txt; do echo "$f: $(tail -n 1 "$f")"; done
cat "$OUT/status.txt"
