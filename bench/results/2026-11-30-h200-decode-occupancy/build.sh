#!/usr/bin/env bash
# Builds the libraries of run.sh on the CPU machine (nvcc 13, .cutlass/include) into out/dec2 from the TL
# files here: qattn_translate, then nvcc with the translation's flags. bn64x2 is also compiled with
# __launch_bounds__(kThreads, 2) (two blocks per SM: 128 registers at launch; its TL consumer Role asks
# 208 after setmaxnreg, and its Grid is not {persistent}, so the launch has one block per tile).
set -eu
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"; HERE="$(cd "$(dirname "$0")" && pwd)"; OUT=$ROOT/out/dec2
mkdir -p "$OUT"
for f in base base_np bn64 bn64s4 bn64x2; do
  "$ROOT/build/qattn_translate" "$HERE/tl/$f.tl" --gpu h100 -o "$OUT/$f.cu"
  [ $f = bn64x2 ] && sed -i 's/__launch_bounds__(kThreads, 1)/__launch_bounds__(kThreads, 2)/' "$OUT/$f.cu"
  nvcc $("$ROOT/build/qattn_translate" "$HERE/tl/$f.tl" --gpu h100 --flags) -I"$ROOT/include" -I"$ROOT/device" \
    -I"$ROOT/.cutlass/include" -shared -Xcompiler -fPIC -Xptxas -v -o "$OUT/lib_$f.so" "$OUT/$f.cu" 2>&1 | grep -E "registers|spill" | tail -2
done
