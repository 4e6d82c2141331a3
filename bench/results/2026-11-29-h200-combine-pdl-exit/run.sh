#!/usr/bin/env bash
# (1) The PY0109 refusals of learnable ALiBi slopes / bias tables (this tree's python/), (2) the combine
# as a programmatic dependent launch triggered at the split kernel's exit (out/pdl2v: main + pdl.patch
# of 2026-11-29-h200-combine-pdl without its early trigger) against this tree, two sweeps, (3) the
# variant's split / kvcache tests. Carry out/carry, out/gpu-py, out/pdl2v. Stops at the first failure.
set -u
tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
timeout 200 python3 -m pytest -q -x tests/python/test_op_cpu.py "tests/python/test_gpu.py::test_auxiliary_inputs_are_checked" \
  "tests/python/test_gpu.py::test_compiled_kernel_matches_attention" > $OUT/pytest_guard.txt 2>&1
rc=$?; tail -3 $OUT/pytest_guard.txt; echo "pytest guard rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || exit 1
for n in 1 2; do
  timeout 170 python3 bench/bench_kvcache.py $OUT/results_$n.csv --rounds 9 \
    --also pdl2=$PWD/out/pdl2v/device:$PWD/out/pdl2v/qattn > $OUT/decode_$n.txt 2>&1
  rc=$?; echo "sweep $n rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || { tail -20 $OUT/decode_$n.txt; exit 1; }
done
grep -h "speed vs" $OUT/decode_1.txt $OUT/decode_2.txt
QATTN_HOME=$PWD/out/pdl2v QATTN_BIN=$PWD/out/pdl2v/qattn QATTN_CACHE_DIR=/tmp/qc_pdl2 timeout 200 python3 -m pytest -q -x \
  tests/python/test_split_keys.py tests/python/test_combine.py > $OUT/pytest_pdl2.txt 2>&1
rc=$?; tail -3 $OUT/pytest_pdl2.txt; echo "pytest pdl2 rc=$rc $(( $(date +%s) - S )) s"
