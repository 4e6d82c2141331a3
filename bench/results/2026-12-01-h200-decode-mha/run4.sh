#!/usr/bin/env bash
# Fourth device call (carried: out/carry, out/gpu-py = this tree: MHA decoding through the one-tile kernel,
# `short_queries` -> "decode1" and the planner's decode_tile for group 1; out/parent = the parent's device/
# and qattn; out/var_s3/qattn = this tree + three ring stages for every one-tile decoding kernel; .whl):
# the three in one process, then the decoding and KV-cache tests on this tree.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
source tests/gpu/pytest_env.sh
timeout 240 python3 bench/bench_kvcache.py "$OUT/results.csv" --rounds 9 --pages 0,16,64 \
  --rows mha_32_32_b8_4k,mha_32_32_b32_8k,mha_16_16_b4_16k,gqa_32_8_b32_8k,mqa_32_1_b32_8k \
  --also parent=out/parent/device:out/parent/qattn --also s3=out/parent/device:out/var_s3/qattn > "$OUT/decode.txt" 2>&1
echo "bench exit $? at $SECONDS s"; cat "$OUT/decode.txt"
timeout 170 python3 -m pytest -q -x tests/python/test_kvcache.py tests/python/test_gpu.py -k "kvcache or bf16_d128_mha_gqa_mqa" > "$OUT/pytest.txt" 2>&1
echo "pytest exit $? at $SECONDS s"; tail -4 "$OUT/pytest.txt"
