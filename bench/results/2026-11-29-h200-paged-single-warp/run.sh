#!/usr/bin/env bash
# The single-warp producer loop (this tree) against main at d277a63 (out/parent: its device/ and
# stripped qattn), on the device machine from the repository root; carry .cutlass tarball, out/gpu-py
# (this tree's stripped qattn + its libraries), out/parent. Stops at the first failure.
set -u
tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 240 python3 -m pytest -q -x tests/python/test_kvcache.py tests/python/test_split_keys.py > $OUT/pytest.txt 2>&1
rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || exit 1
for n in 1 2; do
  timeout 200 python3 bench/bench_kvcache.py $OUT/results_$n.csv --rounds 7 \
    --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/decode_$n.txt 2>&1
  rc=$?; echo "sweep $n rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { tail -20 $OUT/decode_$n.txt; exit 1; }
done
grep -h "speed vs\|^gqa\|^mqa\|^mha" $OUT/decode_1.txt | head -60
# (second call, the same day: the varlen and flash_attn_interface suites with this tree; chunked
# prefill over pages of 16 / 64 and flash_attn_with_kvcache over a paged cache)
# timeout 400 python3 -m pytest -q -x tests/python/test_varlen.py tests/python/test_flash_attn_interface.py
