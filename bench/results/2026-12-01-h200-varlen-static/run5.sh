#!/usr/bin/env bash
# Issue 20, call 5: the kernels of attention_varlen's decoding and of attention_with_kvcache on the MQA
# rows (kernels_probe.py: device times per kernel, torch profiler).
set -u
source tests/gpu/device_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 300 python3 bench/results/2026-12-01-h200-varlen-static/kernels_probe.py > $OUT/kernels.txt 2>&1
rc=$?; echo "probe rc=$rc $(( $(date +%s) - S )) s"; grep -v "^qattn:" $OUT/kernels.txt | tail -20
