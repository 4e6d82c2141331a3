#!/bin/bash
cd /tmp/s80/h
one() {
  b=$1
  nvcc $(/work/main/build/qattn_translate $b.tl --gpu h100 --flags) \
    -I/work/main/include -I/work/main/device -I/work/main/.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v \
    -o $b.so $b.cu > $b.log 2>&1 && echo "$b ok $(grep -o 'Used [0-9]* registers' $b.log | tail -1) $(grep -o '[0-9]* bytes spill stores' $b.log | sort -n | tail -1)" || echo "$b FAIL"
}
export -f one
ls *.cu | sed 's/\.cu$//' | xargs -P 2 -I{} bash -c 'one {}'
