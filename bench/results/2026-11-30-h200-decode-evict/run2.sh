#!/usr/bin/env bash
# Call 3: the evict-first K / V loads through the package (device/qattn/sm90: Params::kv_stream, set by
# make_params for the launches kv_streamed accepts): numerics (the KV-cache and split-keys suites),
# then bench/bench_kvcache.py in one process with `--also parent` = main at 868152d (no hint; the
# forward kernels of decoding are otherwise the same). Carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 250 python3 -m pytest -q -x tests/python/test_kvcache.py tests/python/test_split_keys.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
timeout 330 python3 bench/bench_kvcache.py $OUT/results2.csv --rounds 9 --pages 0,64 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/decode.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; cat $OUT/decode.txt | tail -20
