#!/usr/bin/env bash
# The learnable-bias backward after the tile fast paths (this tree) against its parent eb4c7d1
# (out/parent2: device/, python/, include/, data/ and stripped qattn; $PARENT overrides it), each runtime in its own
# processes and cache; the kernels built in parallel with this tree's pytest cases, then two timed
# rounds of bench/bench_aux_grad.py per runtime, alternating. Carry out/carry, out/gpu-py, out/parent2.
set -u
tar -xJf out/carry/cutlass.tar.xz
export QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include LD_LIBRARY_PATH=$PWD/out/gpu-py/lib PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 QATTN_VERBOSE=0
new() { QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CACHE_DIR=/tmp/qc_new PYTHONPATH=$PWD/python "$@"; }
P=${PARENT:-out/parent2}  # the parent's tree (run 2: PARENT=out/parent3, bb8fc69)
old() { QATTN_BIN=$PWD/$P/qattn QATTN_HOME=$PWD/$P QATTN_CACHE_DIR=/tmp/qc_old PYTHONPATH=$PWD/$P/python "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
B="python3 bench/bench_aux_grad.py"
(new timeout 400 python3 -m pytest -q -x "tests/python/test_gpu.py::test_learnable_alibi_slopes_and_bias_table" > $OUT/pytest_ab.txt 2>&1; echo "pytest rc=$?" >> $OUT/pytest_ab.txt) &
(new timeout 400 $B /tmp/w1.csv --seqlens 1024 --tokens 1024 --rounds 1 --no-flex > $OUT/warm_new.txt 2>&1; echo "rc=$?" >> $OUT/warm_new.txt) &
(old timeout 400 $B /tmp/w2.csv --seqlens 1024 --tokens 1024 --rounds 1 --no-flex > $OUT/warm_old.txt 2>&1; echo "rc=$?" >> $OUT/warm_old.txt) &
wait
tail -n 2 $OUT/pytest_ab.txt $OUT/warm_new.txt $OUT/warm_old.txt; echo "built: $(( $(date +%s) - S )) s"
grep -q "pytest rc=0" $OUT/pytest_ab.txt || exit 1
for r in 1 2; do
  new timeout 120 $B $OUT/new_$r.csv --seqlens 1024,4096 --rounds 5 --no-flex > $OUT/bench_new_$r.txt 2>&1
  old timeout 120 $B $OUT/old_$r.csv --seqlens 1024,4096 --rounds 5 --no-flex > $OUT/bench_old_$r.txt 2>&1
  echo "round $r: $(( $(date +%s) - S )) s"
done
grep -h "^b" $OUT/bench_new_*.txt $OUT/bench_old_*.txt
