#!/usr/bin/env bash
# On the device machine from the repository root, out/dec2 carried (build.sh's libraries): the split
# kernel alone on the four decoding rows, each library in the same rounds; @xF = F times the parts.
set -u
D=out/dec2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONPATH=$PWD/python timeout 300 python3 bench/bench_merge_probe.py --rounds 9 base=$D/lib_base.so base_np=$D/lib_base_np.so \
  base_np2=$D/lib_base_np.so@x2 bn64=$D/lib_bn64.so bn64s4=$D/lib_bn64s4.so bn64x2=$D/lib_bn64x2.so bn64x2p2=$D/lib_bn64x2.so@x2 \
  bn64x2p4=$D/lib_bn64x2.so@x4 2>&1 | tee $OUT/probe.txt
