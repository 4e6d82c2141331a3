#!/usr/bin/env bash
# On the device machine from the repository root, out/evict carried (build.sh's libraries): the decoding
# kernel alone on the key split's folded launches (bench/bench_decode_tiles.py: CUDA graphs of 20,
# medians of 9 rounds in a rotating order, outputs compared with base first), with and without the
# L2 evict-first hint on the K / V loads and the maps' L2 promotion.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
PYTHONPATH=$PWD/python timeout 400 python3 bench/bench_decode_tiles.py out/evict/so $OUT/results.csv --rounds 9 \
  --rows mqa_32_1_b32_8k,mqa_16_1_b8_16k,gqa_32_8_b32_8k,gqa_64_8_b8_32k,mha_32_32_b8_4k,gqa_32_8_b128_4k,gqa_32_8_b1_64k 2>&1 | tee $OUT/bench.txt
