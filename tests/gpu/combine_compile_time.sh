#!/usr/bin/env bash
# nvcc time of one generated combine kernel: the CuTe-free runtime (device/qattn/rowwise.cuh) against
# a copy generated with the earlier CuTe-based one (given as a .cu, with OLD_INC a folder holding the
# earlier qattn/rowwise.cuh and qattn/layout.cuh, searched first), the same flags, 3 runs each.
#   bash tests/gpu/combine_compile_time.sh NEW.cu OLD.cu OLD_INC
set -u
NEW=${1:?NEW.cu}; OLD=${2:?OLD.cu}; OLD_INC=${3:?OLD_INC}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CUTLASS=${QATTN_CUTLASS_INCLUDE:-$ROOT/.cutlass/include}
flags="-gencode=arch=compute_80,code=sm_90 -gencode=arch=compute_80,code=compute_80 -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG --use_fast_math"
for which in new old; do
  f=$NEW; inc=""; [ $which = old ] && f=$OLD && inc="-I $OLD_INC"
  for i in 1 2 3; do
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    nvcc $flags -Xcompiler -fPIC -shared $inc -I "$ROOT/include" -I "$ROOT/device" -I "$CUTLASS" -diag-suppress 177 -o /tmp/cc_$which.so "$f" || exit 1
    echo "$which run $i: $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s"
  done
done
