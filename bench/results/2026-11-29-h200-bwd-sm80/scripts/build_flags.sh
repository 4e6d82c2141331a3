#!/bin/bash
# the same CUDA compiled from compute_80 PTX (the package's flags for the mma.sync family on sm90)
# and from compute_90 PTX, both to sm_90 SASS
cd /tmp/s80/fl
one() {
  b=$1; t=$2
  nvcc -gencode=arch=compute_${t},code=sm_90 -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG --use_fast_math \
    -I/work/main/include -I/work/main/device -I/work/main/.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v \
    -o ${b}_c$t.so $b.cu > ${b}_c$t.log 2>&1 && echo "${b}_c$t ok $(grep -o 'Used [0-9]* registers' ${b}_c$t.log | tail -1) $(grep -o '[0-9]* bytes spill stores' ${b}_c$t.log | sort -n | tail -1)" || echo "${b}_c$t FAIL"
}
export -f one
for b in d256_h mla_h d128_a d64n_a; do echo "$b 80"; echo "$b 90"; done | xargs -P 2 -L 1 bash -c 'one $0 $1'
