#!/usr/bin/env bash
# Issue 20, call 6: the ragged decoding kernel on a grid of one block per tile (not persistent: no
# live-tile numbering before the first copies; src/plan/plan.cc decode_tile): the varlen suite's
# decoding / static-buffer / split tests, then the decoding rows, attention_varlen against
# attention_with_kvcache in one process (bench_kvcache.py --varlen).
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 200 python3 bench/bench_kvcache.py $OUT/results.csv --rounds 9 --varlen --pages 0,16 > $OUT/decode.txt 2>&1
rc=$?; echo "sweep rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || tail -20 $OUT/decode.txt
grep -h "^gqa\|^mqa\|^mha\|attention_varlen" $OUT/decode.txt | head -60
timeout 250 python3 -m pytest -q tests/python/test_varlen.py -k "static or short_varlen or split or cache or slots" > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60; }
