#!/usr/bin/env bash
# On the device machine from the repository root, out/tline carried: lib_base.so, the planner's MQA /
# GQA decoding split kernel from ../2026-11-30-h200-decode-occupancy/tl/base.tl; lib_stamp.so and
# lib_fine.so, the same .cu through stamp.py (and --fine); lib_warm.so / lib_warmfine.so, base.cu /
# fine.cu through warm.py. All nvcc 13 with `qattn_translate --flags`, built on the CPU machine.
# Call 1 (probe1.txt): base stamp; call 2 (probe2.txt): base stamp fine; call 3 (probe4.txt): all.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
L=out/tline
PYTHONPATH=$PWD/python timeout 300 python3 bench/results/2026-11-30-h200-decode-timeline/probe.py base=$L/lib_base.so \
  warm=$L/lib_warm.so stamp=$L/lib_stamp.so fine=$L/lib_fine.so warmfine=$L/lib_warmfine.so 2>&1 | tee $OUT/probe4.txt
# Calls 5 and 6 (probe5.txt, probe6.txt): which part of warm.py's prologue matters: lib_pre.so (warm.py --only
# prefetch), lib_bar32.so (--only bar32), twice each; call 6 with base first and again fourth (a copy,
# base2), which showed that the first library of each round runs 0.3-0.5 us slower (no variant helps).
for i in 1 2; do
  PYTHONPATH=$PWD/python timeout 200 python3 bench/results/2026-11-30-h200-decode-timeline/probe.py base=$L/lib_base.so \
    warm=$L/lib_warm.so pre=$L/lib_pre.so bar32=$L/lib_bar32.so 2>&1 | tee -a $OUT/probe5.txt
done
cp $L/lib_base.so /tmp/lib_base2.so
for i in 1 2; do
  PYTHONPATH=$PWD/python timeout 200 python3 bench/results/2026-11-30-h200-decode-timeline/probe.py warm=$L/lib_warm.so \
    base=$L/lib_base.so pre=$L/lib_pre.so base2=/tmp/lib_base2.so bar32=$L/lib_bar32.so 2>&1 | tee -a $OUT/probe6.txt
done
