#!/usr/bin/env bash
# Issue 20: decoding through attention_varlen / flash_attn_varlen_func over a KV cache (one query, or a
# few, in every sequence) runs as attention_with_kvcache: GQA packing and the key split, which the
# ragged kernel has neither of. The varlen, KV-cache and FA-interface suites, then the decode table with
# the varlen calls beside the batched ones and the ragged kernel (bench_kvcache.py --varlen). On the
# device machine from the repository root; carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 300 python3 -m pytest -q -x tests/python/test_varlen.py tests/python/test_flash_attn_interface.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -80; exit 1; }
timeout 250 python3 bench/bench_kvcache.py $OUT/results.csv --rounds 7 --varlen --pages 0,16,64 > $OUT/decode.txt 2>&1
rc=$?; echo "sweep rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode.txt
grep -h "^gqa\|^mqa\|^mha\|attention_varlen" $OUT/decode.txt | head -60
