#!/bin/bash
# Compile every .cu of out/lazy into NAME.so (ptxas -v into NAME.log) with the backward's sm90 flags.
cd out/lazy
FL="$(../gpu-py/qattn_translate flags.tl --gpu h100 --flags)"
one() { nvcc $FL -I../../include -I../../device -I../../.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v -o $1.so $1.cu > $1.log 2>&1 \
  && echo "$1 ok $(grep -o 'Used [0-9]* registers' $1.log | tail -1) $(grep -o '[0-9]* bytes spill stores' $1.log | sort -n | tail -1)" || { echo "$1 FAIL"; tail -5 $1.log; }; }
export -f one; export FL
ls *.cu | sed 's/\.cu$//' | xargs -P 16 -I{} bash -c 'one {}'
