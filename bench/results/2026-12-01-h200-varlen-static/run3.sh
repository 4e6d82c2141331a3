#!/usr/bin/env bash
# Issue 20, call 3: call 2 plus the L2 policy of decoding launches for the ragged kernel too (the 128-byte
# promotion and the evict-first K / V loads where each sequence has one query tile); the rest as call 2:
# the varlen / KV-cache / FA-interface / split suites (the static-buffer test among them),
# then the decoding rows: attention_varlen (qattn-varlen: max_seqlen_q 1; qattn-varlen-ragged:
# max_seqlen_q 2) against attention_with_kvcache (the batched call the uniform path ran) in one process.
# On the device machine from the repository root; carry out/carry, out/gpu-py, .whl.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 330 python3 -m pytest -q -x tests/python/test_varlen.py tests/python/test_flash_attn_interface.py tests/python/test_kvcache.py tests/python/test_split_keys.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60; }
timeout 220 python3 bench/bench_kvcache.py $OUT/results.csv --rounds 9 --varlen --pages 0,16,64 > $OUT/decode.txt 2>&1
rc=$?; echo "sweep rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode.txt
grep -h "^gqa\|^mqa\|^mha\|attention_varlen" $OUT/decode.txt | head -60
