#!/usr/bin/env bash
# Call 2: the key split with v_from_k (tests/python/test_mla_decode.py, every split count against one
# launch), the benchmark with the split (impl qattn) beside one launch (qattn-nosplit), and the KV-cache /
# split / combine / flash_attn_interface suites (the packed tensor maps changed for groups of 128).
#   bash bench/results/2026-11-30-h200-mla-decode/run2.sh   (out/carry, out/gpu-py carried)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
timeout 200 python3 -m pytest -q -x tests/python/test_mla_decode.py -rs > "$OUT/pytest_mla.txt" 2>&1; echo "mla pytest rc $?" >> "$OUT/status.txt"
tail -3 "$OUT/pytest_mla.txt"
timeout 200 python3 bench/bench_mla_decode.py "$OUT/results.csv" --rounds 7 > "$OUT/bench.txt" 2>&1; echo "bench rc $?" >> "$OUT/status.txt"
grep -v Warning "$OUT/bench.txt" | grep -v "return F.scaled" | tail -40
timeout 280 python3 -m pytest -q tests/python/test_kvcache.py tests/python/test_split_keys.py tests/python/test_combine.py tests/python/test_flash_attn_interface.py -rs > "$OUT/pytest_kvcache.txt" 2>&1; echo "kvcache/split/combine/fai pytest rc $?" >> "$OUT/status.txt"
tail -3 "$OUT/pytest_kvcache.txt"
cat "$OUT/status.txt"
