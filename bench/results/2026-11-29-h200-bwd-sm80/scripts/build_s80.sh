#!/bin/bash
# nvcc the translated variants for sm_90 (the sm80 code runs on Hopper as mma.sync / cp.async)
cd /tmp/s80/v
one() {
  b=$1
  nvcc -gencode=arch=compute_90,code=sm_90 -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG --use_fast_math \
    -I/work/main/include -I/work/main/device -I/work/main/.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v \
    -o $b.so $b.cu > $b.log 2>&1 && echo "$b ok $(grep -o 'Used [0-9]* registers' $b.log | tail -1) $(grep -o '[0-9]* bytes spill stores' $b.log | sort -n | tail -1)" || echo "$b FAIL"
}
export -f one
ls *.cu | sed 's/\.cu$//' | xargs -P 2 -I{} bash -c 'one {}'
