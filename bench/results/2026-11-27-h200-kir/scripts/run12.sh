#!/usr/bin/env bash
# the ragged-batch and KV-cache suites' tests after the descriptor change
set -uo pipefail
ROOT=$PWD
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib QATTN_HOME=$ROOT PYTHONUNBUFFERED=1 CUTLASS_INCLUDE=$ROOT/.cutlass/include QATTN_CUTLASS_INCLUDE=$ROOT/.cutlass/include
QATTN_BIN=$ROOT/out/gpu-py/qattn VARLEN_TESTS_ONLY=1 timeout 280 bash tests/gpu/varlen_suite.sh $OUT/varlen > $OUT/varlen.txt 2>&1; echo "varlen rc $?"; tail -3 $OUT/varlen.txt; tail -3 $OUT/varlen/pytest.txt
QATTN_BIN=$ROOT/out/gpu-py/qattn timeout 280 bash tests/gpu/kvcache_suite.sh $OUT/kv > $OUT/kvcache.txt 2>&1; echo "kvcache rc $?"; tail -3 $OUT/kvcache.txt; tail -3 $OUT/kv/pytest.txt
echo "done in $SECONDS s"
