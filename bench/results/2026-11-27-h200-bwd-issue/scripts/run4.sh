#!/usr/bin/env bash
# dQ by per-warp bulk reductions (1 or 2 staging slots a warp) against the parent, same process
set -uo pipefail
ROOT=$PWD; K=/tmp/kk4; rm -rf $K; mkdir -p $K; cp out/ab_var2/dq_exp.cuh $K/
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=(); for n in c n d64c d64n; do args+=(--cu "par_$n=$ROOT/out/ab_var2/par/par_$n.cu" --cu "bulk1_$n=$ROOT/out/ab_var2/bulk/bulk1_$n.cu" --cu "bulk2_$n=$ROOT/out/ab_var2/bulk/bulk2_$n.cu"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^$' -j 16 "${args[@]}" 2>&1 | tail -12
python3 tests/gpu/bwd_check.py $K/bulk*.so --random 4 2>&1 | grep -v ": ok " | tail -4
libs=""; for n in c n d64c d64n; do libs="$libs $K/par_$n.so $K/bulk1_$n.so $K/bulk2_$n.so"; done
python3 tests/gpu/bwd_check.py $libs --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' --csv $OUT/ab.csv 2>&1 | grep -v ": ok\|exceed" | tail -37
