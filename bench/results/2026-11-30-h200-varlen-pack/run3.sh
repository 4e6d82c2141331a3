#!/usr/bin/env bash
# Call 3: the callers of the ragged kernel after the change: transformers' integration (padding masks
# through attention_varlen; GQA 4/2, head dim 32), the FlashAttention interface and the varlen suite
# again with a group of 7 (Qwen2.5-7B's 28/4: the unpacked kernel, _build.varlen_kind), the KV-cache
# suite. Carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 500 python3 -m pytest -q tests/python/test_integrations.py tests/python/test_varlen.py tests/python/test_kvcache.py \
  > $OUT/pytest3.txt 2>&1
rc=$?; tail -3 $OUT/pytest3.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest3.txt | head -60
