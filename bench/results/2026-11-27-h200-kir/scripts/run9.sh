#!/usr/bin/env bash
# Issue 17 part 2 on the new kernels: TL-edit schedules, compute-sanitizer + bit-identical repeats,
# the variants against FlexAttention (tests/gpu/kir_suite.sh 2)
set -uo pipefail
ROOT=$PWD
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
[ -x out/old6539/bin/qattn ] || { rm -rf out/old6539; tar -xJf out/carry/old.tar.xz -C out/; }
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib
rm -rf out/kir
bash tests/gpu/build_kernels.sh out/kir --run-sm 90 --bin out/gpu-py --cutlass .cutlass/include -j 16 --only '^(sm90|neg_sm90)' > $OUT/build_new.txt 2>&1
grep -v ": ok" $OUT/build_new.txt | head -5; echo "built in $SECONDS s"
timeout 540 bash tests/gpu/kir_suite.sh 2 $OUT out/gpu-py out/old6539
echo "rc $? in $SECONDS s"
