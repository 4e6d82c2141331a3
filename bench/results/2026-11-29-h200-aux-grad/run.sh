#!/usr/bin/env bash
# Learnable ALiBi slopes / bias tables on the GPU (issue 19): the pytest cases (against fp32 autograd),
# the kernels of the benchmark built in parallel with them, then bench/bench_aux_grad.py alone.
# On the device machine from the repository root; carry out/carry (CUTLASS) and out/gpu-py.
set -u
tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
(timeout 400 python3 -m pytest -q -x tests/python/test_op_cpu.py "tests/python/test_gpu.py::test_learnable_alibi_slopes_and_bias_table" \
   "tests/python/test_gpu.py::test_auxiliary_inputs_are_checked" > $OUT/pytest_aux.txt 2>&1; echo "pytest rc=$?" >> $OUT/pytest_aux.txt) &
(timeout 400 python3 bench/bench_aux_grad.py /tmp/warm.csv --seqlens 1024 --tokens 1024 --rounds 1 --no-flex > $OUT/warm.txt 2>&1; echo "warm rc=$?" >> $OUT/warm.txt) &
wait
tail -4 $OUT/pytest_aux.txt; tail -3 $OUT/warm.txt; echo "built and tested: $(( $(date +%s) - S )) s"
grep -q "pytest rc=0" $OUT/pytest_aux.txt || exit 1
timeout $((560 - $(date +%s) + S)) python3 bench/bench_aux_grad.py $OUT/results.csv --seqlens 1024,4096 --rounds 5 > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; cat $OUT/bench.txt | tail -8
