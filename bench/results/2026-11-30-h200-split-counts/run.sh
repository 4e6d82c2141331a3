#!/usr/bin/env bash
# How many parts decoding's key split should take with the split in TL (Hopper): qattn.attention
# with the count forced, against the count split_keys chooses and cuDNN, on the rows that split (MQA
# 32/1 and 16/1, GQA 8). On the device machine from the repository root; carry out/carry, out/gpu-py.
set -u
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
timeout 400 python3 bench/bench_split_counts.py $OUT/results.csv --counts 2,3,4,6,8,12,16,24,32 --rounds 9 | tee $OUT/counts.txt
