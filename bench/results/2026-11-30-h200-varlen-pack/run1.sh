#!/usr/bin/env bash
# Call 1: numerics of the ragged kernel whose Hopper tiles pack a kv head's query heads (GQA / MQA
# varlen, with and without a KV cache): the varlen and FlashAttention-interface suites (the GQA cases
# now run the packed kernel; a serving step of decoding sequences and prefill chunks is new), and
# `qattn generate --varlen true` through its GPU step (qattn._varlen_check) for two packed kernels.
# On the device machine from the repository root; carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 330 python3 -m pytest -q tests/python/test_varlen.py tests/python/test_flash_attn_interface.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
for a in "--preset llama3-8b --varlen true --lse true" "--preset qwen2.5-72b --varlen true --kv-cache paged --mask causal"; do
  timeout 200 $QATTN_BIN generate $a --gpu h200 --out /tmp/gen >> $OUT/generate.txt 2>&1; echo "generate [$a] rc=$?" | tee -a $OUT/generate.txt
done
grep -E "verif|PASS|FAIL|pack" $OUT/generate.txt | head -20; echo "total $(( $(date +%s) - S )) s"
