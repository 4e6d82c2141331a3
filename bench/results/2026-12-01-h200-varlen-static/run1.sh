#!/usr/bin/env bash
# Issue 20: attention_varlen over a KV cache with a fixed-size query buffer (batch x max_seqlen_q rows,
# shorter sequences leaving spare rows). Call 1, the tree before the fix: the new test (expected to
# fail: the row count alone sends the call down the uniform path), then the decoding rows through the
# uniform path (qattn-varlen) against the ragged kernel (qattn-varlen-ragged: max_seqlen_q 2) and the
# batched call. On the device machine from the repository root; carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 200 python3 -m pytest -q tests/python/test_varlen.py -k "static_query_buffer or uniform_varlen" > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; grep -A3 "^E .*sequence\|AssertionError" $OUT/pytest.txt | head -30
timeout 330 python3 bench/bench_kvcache.py $OUT/results.csv --rounds 7 --varlen --pages 0,16 \
  --rows mqa_32_1_b32_8k,mqa_16_1_b8_16k,gqa_32_8_b32_8k,gqa_32_8_b1_64k,gqa_32_8_b4_16k,mha_32_32_b8_4k,gqa_32_8_b64_1k > $OUT/decode.txt 2>&1
rc=$?; echo "sweep rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode.txt
grep -h "^gqa\|^mqa\|^mha\|attention_varlen" $OUT/decode.txt | head -60
