#!/usr/bin/env bash
# dQ row-contiguous (per-warp staging + red.v4) against the parent, same process
set -uo pipefail
ROOT=$PWD; K=/tmp/kk3; rm -rf $K; mkdir -p $K; cp out/ab_var2/dq_exp.cuh $K/
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=(); for n in c n d64c d64n; do args+=(--cu "par_$n=$ROOT/out/ab_var2/par/par_$n.cu" --cu "rows_$n=$ROOT/out/ab_var2/rows/rows_$n.cu"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^$' -j 16 "${args[@]}" 2>&1 | tail -12
python3 tests/gpu/bwd_check.py $K/rows_*.so --random 6 2>&1 | grep -v ": ok " | tail -4
python3 tests/gpu/bwd_check.py $K/par_c.so $K/rows_c.so $K/par_n.so $K/rows_n.so $K/par_d64c.so $K/rows_d64c.so $K/par_d64n.so $K/rows_d64n.so \
  --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' --csv $OUT/ab.csv 2>&1 | grep -v ": ok\|exceed" | tail -26
