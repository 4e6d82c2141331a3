#!/bin/bash
# Translate and build every TL of out/lazy2/tl into out/lazy2/NAME.so (ptxas -v into NAME.log),
# on the device machine (16 cores): QATTN_TRANSLATE, CUTLASS at .cutlass/include.
cd out/lazy2
one() {
  b=$1; T=${QATTN_TRANSLATE:-../gpu-py/qattn_translate}
  $T tl/$b.tl --gpu h100 -o $b.cu || { echo "$b TRANSLATE FAIL"; return; }
  nvcc $($T tl/$b.tl --gpu h100 --flags) -I../../include -I../../device -I../../.cutlass/include -shared -Xcompiler -fPIC -Xptxas -v \
    -o $b.so $b.cu > $b.log 2>&1 && echo "$b ok $(grep -o 'Used [0-9]* registers' $b.log | tail -1) $(grep -o '[0-9]* bytes spill stores' $b.log | sort -n | tail -1)" || { echo "$b FAIL"; tail -5 $b.log; }
}
export -f one
ls tl/*.tl | sed 's#tl/##; s/\.tl$//' | xargs -P 16 -I{} bash -c 'one {}'
