#!/usr/bin/env bash
# after the descriptor change: numerics of every sm90 kernel of build_kernels.sh (neg_* must fail),
# the ragged-batch and KV-cache suites' tests (no benchmarks)
set -uo pipefail
ROOT=$PWD
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib QATTN_HOME=$ROOT PYTHONUNBUFFERED=1
rm -rf out/kir
bash tests/gpu/build_kernels.sh out/kir --run-sm 90 --bin out/gpu-py --cutlass .cutlass/include -j 16 --only '^(sm90|neg_sm90)' > $OUT/build.txt 2>&1
grep -v ": ok" $OUT/build.txt | head -5; echo "built in $SECONDS s"
python3 tests/gpu/verify.py out/kir --only '^(sm90|neg_sm90)' > $OUT/verify_all_sm90.txt 2>&1; grep -E "FAIL|passed|expected" $OUT/verify_all_sm90.txt | tail -6
echo "verified at $SECONDS s"
QATTN_BIN=$ROOT/out/gpu-py VARLEN_TESTS_ONLY=1 timeout 200 bash tests/gpu/varlen_suite.sh $OUT/varlen > $OUT/varlen.txt 2>&1; echo "varlen rc $?"; tail -4 $OUT/varlen.txt
QATTN_BIN=$ROOT/out/gpu-py timeout 200 bash tests/gpu/kvcache_suite.sh $OUT/kv > $OUT/kvcache.txt 2>&1; echo "kvcache rc $?"; tail -4 $OUT/kvcache.txt
echo "done in $SECONDS s"
