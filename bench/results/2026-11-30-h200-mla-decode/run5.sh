#!/usr/bin/env bash
# Call 5: after the review (30f6d95): the absorbed-MLA GPU tests as they are and with QATTN_SPLIT_MODE=fold
# (which built a kernel without the part axis for a split call before), and the split-keys / KV-cache tests.
#   bash bench/results/2026-11-30-h200-mla-decode/run5.sh   (out/carry, out/gpu-py carried)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
timeout 150 python3 -m pytest -q tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla.txt" 2>&1; echo "mla pytest rc $?" >> "$OUT/status.txt"
QATTN_SPLIT_MODE=fold QATTN_CACHE_DIR=/tmp/qc-fold timeout 150 python3 -m pytest -q tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla_fold.txt" 2>&1; echo "mla pytest (fold) rc $?" >> "$OUT/status.txt"
timeout 250 python3 -m pytest -q tests/python/test_split_keys.py tests/python/test_kvcache.py -rs > "$OUT/pytest_kv.txt" 2>&1; echo "split/kvcache pytest rc $?" >> "$OUT/status.txt"
for f in "$OUT"/pytest_*.txt; do echo "$f: $(tail -n 1 "$f")"; done
cat "$OUT/status.txt"
