#!/usr/bin/env bash
# the sm90 forward: descriptors stepped by offsets + uniform warpgroup index + shared smem pointer (new)
# against the parent's CUDA and headers (old), one process (bench/bench_ab.py)
set -uo pipefail
ROOT=$PWD; F=out/ab_var2/fwd; W=/tmp/fwab; rm -rf $W
for v in old new; do for m in causal none; do
  dev=$ROOT/device; [ $v = old ] && dev=$ROOT/$F/old/device
  mkdir -p $W/$v-$m
  nvcc $(cat $F/flags) -I$ROOT/include -I$dev -I$ROOT/.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v -o $W/$v-$m/libqattn_kernel.so $F/$v/$m.cu > $W/$v-$m/log 2>&1 &
done; done; wait
for v in old new; do for m in causal none; do echo "$v-$m: $(grep -o 'Used [0-9]* registers' $W/$v-$m/log | tail -1)"; done; done
for m in causal none; do
  python3 bench/bench_ab.py $W/new-$m $W/old-$m --out $OUT/ab_fwd_$m.csv 2>&1 | tail -5
done
# the backward still builds and verifies with warpgroup() moved to wgmma.cuh
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
bash tests/gpu/build_bwd_kernels.sh /tmp/kk7 --bin out/gpu-py --only '^bwd_d128_causal$' -j 4 2>&1 | tail -2
python3 tests/gpu/bwd_check.py /tmp/kk7/bwd_d128_causal.so --random 4 2>&1 | tail -2
