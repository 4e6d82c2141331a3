#!/usr/bin/env bash
# Issue 20, call 8: the decoding rows' key split at other part counts (splits_probe.py), against the copy
# bandwidth in the same process.
set -u
source tests/gpu/device_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 200 python3 bench/results/2026-12-01-h200-varlen-static/splits_probe.py > $OUT/splits.txt 2>&1
rc=$?; echo "probe rc=$rc $(( $(date +%s) - S )) s"; grep -v "^qattn:" $OUT/splits.txt | tail -12
