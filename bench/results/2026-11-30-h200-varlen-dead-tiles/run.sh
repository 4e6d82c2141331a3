#!/usr/bin/env bash
# The ragged kernel's dead tiles skipped by the persistent scheduler (next_live_tile, Scheduler::next with its dead check;
# the counter reset by the last block done). Call 1 (probe.txt, before the change): probe.py alone.
# Calls 2 (skip.patch, call2/) and 3 (the landed form, call3/), this script: the varlen suite (CUDA graph replays with new lengths reset the counter
# across launches), probe.py, then bench/bench_varlen.py's serving rows against the parent (main at
# 868152d: every dead tile fetched). Carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 220 python3 -m pytest -q -x tests/python/test_varlen.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
timeout 60 python3 bench/results/2026-11-30-h200-varlen-dead-tiles/probe.py > $OUT/probe_after.txt 2>&1; tail -3 $OUT/probe_after.txt
timeout 200 python3 bench/bench_varlen.py $OUT/results.csv --rounds 5 \
  --rows serve_gqa_64x4k+512,serve_gqa_128x2k+2k,serve_gqa64_32x8k+1k,serve_mqa_32x8k+1k,serve_mqa_4x32k+256,mix_uniform_128 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -8 $OUT/bench.txt
# Call 3, second command (call3/bench_mix.txt): the prefill mixes again, 9 rounds.
timeout 75 python3 bench/bench_varlen.py $OUT/results_mix.csv --rounds 9 --rows mix_uniform_128,mix_lognormal_32 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn 2>&1 | tee $OUT/bench_mix.txt | tail -3
