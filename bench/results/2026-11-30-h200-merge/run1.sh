#!/usr/bin/env bash
# Issue 20: split keys merged in the kernel (TL Merge). First call: the numerics (the KV-cache and
# split suites, the GPU step of `qattn generate` for two split kernels), then one decode sweep
# against main at 0c71bd1 (out/parent: its device/ and stripped qattn; the include/ of this tree,
# ABI 10, whose struct extends ABI 9's) and the per-kernel profile of the split rows. On the device
# machine from the repository root; carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 280 python3 -m pytest -q -x tests/python/test_kvcache.py tests/python/test_split_keys.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -80; exit 1; }
for args in "--preset llama3-8b --kv-cache paged --seqlen 1:8192 --split-keys true" "--preset llama2-7b --seqlen 1:8192 --split-keys true --mask none"; do
  timeout 100 $QATTN_BIN generate $args --out /tmp/gen > $OUT/generate.txt 2>&1; rc=$?
  echo "generate rc=$rc: $args"; grep -E "verified|PASS|FAIL|ABI|cases|status" $OUT/generate.txt | tail -6
done
timeout 150 python3 bench/bench_kvcache.py $OUT/results_1.csv --rounds 7 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/decode_1.txt 2>&1
rc=$?; echo "sweep 1 rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode_1.txt
grep -h "speed vs\|^gqa\|^mqa\|^mha" $OUT/decode_1.txt | head -60
timeout 60 python3 tests/gpu/decode_profile.py --rows mqa_32_1_b32_8k,mqa_16_1_b8_16k,gqa_32_8_b1_64k,gqa_32_8_b4_16k --pages 0,16 > $OUT/profile.txt 2>&1
grep -v Warn $OUT/profile.txt | grep -v warn | head -30
