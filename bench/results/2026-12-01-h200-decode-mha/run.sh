#!/usr/bin/env bash
# One device call (carried: out/carry, out/gpu-py = this tree, out/parent = the parent's device/ and its
# stripped qattn, .whl): MHA decoding on one 64-row tile (one consumer warpgroup) against the parent's
# 128 rows on two, in one process (bench_kvcache.py --also), the GQA row as a control; then the
# KV-cache and varlen GPU tests on this tree.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
source tests/gpu/pytest_env.sh
timeout 240 python3 bench/bench_kvcache.py "$OUT/results.csv" --rounds 9 --pages 0,16,64 \
  --rows mha_32_32_b8_4k,mha_32_32_b32_8k,mha_16_16_b4_16k,gqa_32_8_b32_8k --also parent=out/parent/device:out/parent/qattn > "$OUT/decode.txt" 2>&1
echo "bench exit $? at $SECONDS s"; tail -30 "$OUT/decode.txt"
timeout 300 python3 -m pytest -q -rs tests/python/test_kvcache.py tests/python/test_varlen.py > "$OUT/pytest.txt" 2>&1
echo "pytest exit $? at $SECONDS s"; tail -5 "$OUT/pytest.txt"
