#!/usr/bin/env bash
# Second call: the decoding kernels (one 64-row tile) through the package's general GPU suite (short
# and split queries, explain, CUDA graphs, torch.compile) and the GPU step of `qattn generate` for the
# llama3-8b decoding specs (the 13 shapes of qattn.verify incl. 2047 x 3001 and 1100 x 1234: the kernel
# is generic in seqlen_q, so the one-tile kernel runs prefill lengths there too).
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 300 python3 -m pytest -q -x tests/python/test_gpu.py -k "short or split or explain or graph or compile or opcheck or mha_gqa" \
  > $OUT/pytest_gpu.txt 2>&1
rc=$?; tail -3 $OUT/pytest_gpu.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest_gpu.txt | head -80; }
for args in "--preset llama3-8b --seqlen 1:8192" "--preset llama3-8b --kv-cache paged --seqlen 1:8192 --mask none" \
            "--preset qwen2.5-72b --seqlen 8:4096 --mask none"; do
  timeout 100 $QATTN_BIN generate $args --out /tmp/gen > $OUT/generate.txt 2>&1; rc=$?
  echo "generate rc=$rc: $args"; grep -E "tiles BM|passed|FAIL" $OUT/generate.txt | tail -3 | cut -c1-160
done
